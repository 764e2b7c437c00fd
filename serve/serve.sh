#!/usr/bin/env bash
# Offline entrypoint of a ternforge submission: install wheels/ into an isolated venv, start the server.
#   HOST (default 0.0.0.0), PORT (default 8000), MODEL_NAME (default: the directory name)
#   PYTHON (default python3), TERNFORGE_ENGINE (builtin | vllm), TERNFORGE_DEVICE (auto | cpu | cuda)
# Needs no network: pip runs with --no-index from wheels/. Before installing it checks that every pinned
# requirement has a wheel and names each missing one. A venv whose requirements hash matches is reused.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
WHEELS="$HERE/wheels"
# The full pinned closure (every wheel in wheels/, exact versions, written by vendor-wheels).
REQS="$HERE/requirements-serve.txt"
if [[ -d "$HERE/ternforge_server" ]]; then SERVER_PATH="$HERE"; else SERVER_PATH="$HERE/server"; fi
export HOST="${HOST:-0.0.0.0}" PORT="${PORT:-8000}" MODEL_NAME="${MODEL_NAME:-$(basename "$HERE")}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export TOKENIZERS_PARALLELISM=false PYTHONDONTWRITEBYTECODE=1

log() { echo "[serve.sh] $*" >&2; }
command -v "$PY" >/dev/null || { log "no $PY on PATH"; exit 1; }
[[ -f "$REQS" ]] || { log "missing requirements file $REQS"; exit 1; }
[[ -d "$WHEELS" ]] || { log "missing wheels directory $WHEELS"; exit 1; }

# 1. Every requirement has a wheel (name normalized per PEP 503, version equal or equal up to a +local tag).
"$PY" - "$REQS" "$WHEELS" <<'PYEOF'
import os, re, sys
reqs, wheels = sys.argv[1], sys.argv[2]
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
have = {}
for f in os.listdir(wheels):
    if f.endswith(".whl"):
        parts = f[:-4].split("-")
        if len(parts) >= 5:
            have.setdefault(norm(parts[0]), set()).add(parts[1])
def applies(marker):
    if not marker:
        return True
    for mod in ("packaging.markers", "pip._vendor.packaging.markers"):
        try:
            return __import__(mod, fromlist=["Marker"]).Marker(marker).evaluate()
        except ImportError:
            continue
    return True
missing = []
for raw in open(reqs, encoding="utf-8"):
    line = raw.split("#", 1)[0].strip()
    line = re.sub(r"\s--hash=\S+", "", line).rstrip(" \\")  # hash-checking mode: hashes follow the pin
    if not line or line.startswith("-"):
        continue
    spec, _, marker = line.partition(";")
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)\s*", spec)
    if not m:
        print(f"[serve.sh] requirement is not an exact pin: {line}", file=sys.stderr)
        sys.exit(1)
    if not applies(marker.strip()):
        continue
    name, version = m.group(1), m.group(3)
    found = have.get(norm(name), set())
    if not any(v == version or ("+" not in version and v.split("+")[0] == version) for v in found):
        missing.append(f"{name}=={version}")
if missing:
    print("[serve.sh] missing wheels in " + wheels + ": " + " ".join(missing), file=sys.stderr)
    sys.exit(3)
PYEOF

# 2. An isolated venv, reused when its requirements hash matches.
HASH="$(cat "$REQS" | sha256sum | cut -c1-16)-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ -w "$HERE" ]]; then VENV="$HERE/.venv"; else VENV="${TMPDIR:-/tmp}/ternforge-venv-$HASH"; fi
STAMP="$VENV/.ternforge-requirements"
t0=$(date +%s.%N)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" && -x "$VENV/bin/python" ]]; then
  log "reusing $VENV"
else
  rm -rf "$VENV"
  "$PY" -m venv "$VENV" 2>/dev/null || "$PY" -m venv --without-pip "$VENV"
  if "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    PIP=("$VENV/bin/python" -m pip)
  else  # no ensurepip on this Python: run pip straight from its wheel
    PIPWHL="$(ls "$WHEELS"/pip-*.whl 2>/dev/null | head -n1 || true)"
    [[ -n "$PIPWHL" ]] || { log "the venv has no pip and wheels/ has no pip wheel"; exit 3; }
    PIP=("$VENV/bin/python" "$PIPWHL/pip")
  fi
  "${PIP[@]}" install --no-index --find-links "$WHEELS" --no-compile --no-cache-dir -q -r "$REQS"
  echo "$HASH" > "$STAMP"
fi
t1=$(date +%s.%N)
export TERNFORGE_INSTALL_SECONDS="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
log "install took ${TERNFORGE_INSTALL_SECONDS} s"

# 3. The server: loads only what the manifest names, binds HOST:PORT.
REPORT="${TERNFORGE_STARTUP_REPORT:-}"
if [[ -z "$REPORT" ]]; then
  if [[ -w "$HERE" ]]; then REPORT="$HERE/evidence/startup-report.json"; else REPORT="${TMPDIR:-/tmp}/startup-report.json"; fi
fi
export PYTHONPATH="$SERVER_PATH${PYTHONPATH:+:$PYTHONPATH}"
exec "$VENV/bin/python" -m ternforge_server --dir "$HERE" --engine "${TERNFORGE_ENGINE:-builtin}" \
  --device "${TERNFORGE_DEVICE:-auto}" --startup-report "$REPORT" "$@"

#!/usr/bin/env bash
# Offline entrypoint of a ternforge submission: install wheels/ into .packages with the vendored uv, start
# the server.
#   HOST (default 0.0.0.0), PORT (default 8000), MODEL_NAME (default: the directory name)
#   PYTHON (default python<X.Y>, then python3), TERNFORGE_ENGINE (auto | vllm | builtin; unset: the
#   server's default), TERNFORGE_DEVICE (auto | cpu | cuda)
# Needs only a CPython of the version the wheels are for (X.Y, from the lock's header; 3.12 when it names
# none): no venv module, no pip, no network. uv's binary is unpacked from its wheel in wheels/ and installs
# the hash-checked lock offline (--no-index, --offline), without compiling bytecode, into a staging
# directory renamed to .packages only when the install succeeded; .packages is reused while the lock and
# the interpreter are the same.
# Exit codes: 1 a file of the submission is missing or malformed, 2 no interpreter of the wheels' version,
# 3 wheels/ lacks a pinned wheel (each one is named), 4 the install failed (uv's reason is logged).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WHEELS="$HERE/wheels"
# The full pinned closure (every wheel in wheels/, exact versions and sha256, written by vendor-wheels).
REQS="$HERE/requirements-serve.txt"
if [[ -d "$HERE/ternforge_server" ]]; then SERVER_PATH="$HERE"; else SERVER_PATH="$HERE/server"; fi
export HOST="${HOST:-0.0.0.0}" PORT="${PORT:-8000}" MODEL_NAME="${MODEL_NAME:-$(basename "$HERE")}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Only .packages and the interpreter's own library count: no user site, no inherited path.
export PYTHONNOUSERSITE=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PYTHONDONTWRITEBYTECODE

log() { echo "[serve.sh] $*" >&2; }
[[ -f "$REQS" ]] || { log "missing requirements file $REQS"; exit 1; }
[[ -d "$WHEELS" ]] || { log "missing wheels directory $WHEELS"; exit 1; }

# 0. An interpreter of the wheels' version (vendor-wheels writes "for CPython X.Y" in the lock's header).
WANT="$(sed -n 's/^#.* for CPython \([0-9]*\.[0-9]*\) .*/\1/p' "$REQS" | head -n1)"
WANT="${WANT:-3.12}"
if [[ -n "${PYTHON:-}" ]]; then CANDIDATES=("$PYTHON"); else CANDIDATES=("python$WANT" python3); fi
PY=""
TRIED=()
for c in "${CANDIDATES[@]}"; do
  if ! command -v "$c" >/dev/null 2>&1; then TRIED+=("$c: not found"); continue; fi
  v="$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "does not run")"
  if [[ "$v" == "$WANT" ]]; then PY="$(command -v "$c")"; break; fi
  TRIED+=("$c: $v")
done
if [[ -z "$PY" ]]; then
  log "need CPython $WANT (the wheels in wheels/ are built for it): $(IFS=';'; echo "${TRIED[*]}" | sed 's/;/; /g'); set PYTHON to a python$WANT"
  exit 2
fi

# 1. Every requirement has a wheel (name normalized per PEP 503, version equal or equal up to a +local
#    tag), uv among them; the lines to install (all but uv's) go to $INSTALL_REQS.
TOOLS="$(mktemp -d "${TMPDIR:-/tmp}/ternforge-serve-XXXXXX")"
STAGE=""
cleanup() { rm -rf "$TOOLS"; [[ -z "$STAGE" ]] || rm -rf "$STAGE"; }
trap cleanup EXIT
INSTALL_REQS="$TOOLS/requirements.txt"
"$PY" - "$REQS" "$WHEELS" "$INSTALL_REQS" <<'PYEOF'
import os, re, sys
reqs, wheels, out = sys.argv[1], sys.argv[2], sys.argv[3]
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
have = {}
for f in os.listdir(wheels):
    if f.endswith(".whl"):
        parts = f[:-4].split("-")
        if len(parts) >= 5:
            have.setdefault(norm(parts[0]), set()).add(parts[1])
missing, keep, uv = [], [], None
for raw in open(reqs, encoding="utf-8"):
    line = raw.split("#", 1)[0].strip()
    pin = re.sub(r"\s--hash=\S+", "", line).rstrip(" \\")  # hash-checking mode: hashes follow the pin
    if not pin or pin.startswith("-"):
        continue
    if ";" in pin:
        print(f"[serve.sh] requirement has an environment marker (the lock is for one target): {pin}", file=sys.stderr)
        sys.exit(1)
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*(\S+)", pin)
    if not m:
        print(f"[serve.sh] requirement is not an exact pin: {pin}", file=sys.stderr)
        sys.exit(1)
    name, version = m.group(1), m.group(3)
    found = have.get(norm(name), set())
    if not any(v == version or ("+" not in version and v.split("+")[0] == version) for v in found):
        missing.append(f"{name}=={version}")
    if norm(name) == "uv":
        uv = version
    else:
        keep.append(line)
if uv is None:
    missing.append("uv (the installer serve.sh runs; pin it in the serving requirements)")
if missing:
    print("[serve.sh] missing wheels in " + wheels + ": " + " ".join(missing), file=sys.stderr)
    sys.exit(3)
with open(out, "w", encoding="utf-8") as f:
    f.write("\n".join(keep) + "\n")
PYEOF

# 2. .packages, reused when its stamp (lock hash + interpreter) matches; else installed in a staging
#    directory beside it and renamed into place only on success.
HASH="$(sha256sum "$REQS" | cut -c1-16)-$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
if [[ -w "$HERE" ]]; then PKGS="$HERE/.packages"; else PKGS="${TMPDIR:-/tmp}/ternforge-packages-$HASH"; fi
STAMP="$PKGS/.ternforge-requirements"
t0=$(date +%s.%N)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
  log "reusing $PKGS"
else
  UVWHL="$(ls "$WHEELS"/uv-*.whl | head -n1)"
  "$PY" - "$UVWHL" "$TOOLS/uv" <<'PYEOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.endswith(".data/scripts/uv")]
    if not names:
        sys.exit(f"[serve.sh] {sys.argv[1]} has no uv binary (.data/scripts/uv)")
    with z.open(names[0]) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
os.chmod(sys.argv[2], 0o755)
PYEOF
  STAGE="$(dirname "$PKGS")/.packages.staging-$$"
  rm -rf "$STAGE"
  HASHED=(); grep -q -- '--hash=sha256:' "$INSTALL_REQS" && HASHED=(--require-hashes)
  log "installing $(grep -c . "$INSTALL_REQS") wheels with uv $("$TOOLS/uv" --version | cut -d' ' -f2) for $PY into $PKGS"
  # uv's cache lives beside the staging directory (same file system: files are hard-linked, not copied).
  if ! env -u UV_INDEX_URL -u UV_EXTRA_INDEX_URL -u UV_FIND_LINKS -u UV_CONSTRAINT -u UV_OVERRIDE \
      UV_CACHE_DIR="$STAGE.cache" UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 \
      "$TOOLS/uv" pip install --offline --no-config --no-index --find-links "$WHEELS" "${HASHED[@]}" \
      --only-binary :all: --target "$STAGE" --python "$PY" -q -r "$INSTALL_REQS" 2>"$TOOLS/uv.log"; then
    rm -rf "$STAGE.cache"
    log "install failed: $(tail -n 20 "$TOOLS/uv.log")"
    exit 4
  fi
  # uv's cache is only hard links to the installed files now: removed in the background, at low priority.
  mv "$STAGE.cache" "$STAGE.trash"
  (nohup nice -n 19 rm -rf "$STAGE.trash" >/dev/null 2>&1 &)
  # PYTHONPATH entries get no .pth processing; this makes Python process the ones the wheels ship.
  cat > "$STAGE/sitecustomize.py" <<'PYEOF'
# Written by serve.sh: process the .pth files of the packages installed here (PYTHONPATH alone does not).
import os, site
site.addsitedir(os.path.dirname(os.path.abspath(__file__)))
PYEOF
  echo "$HASH" > "$STAGE/.ternforge-requirements"
  OLD=""
  if [[ -e "$PKGS" ]]; then OLD="$STAGE.old"; mv "$PKGS" "$OLD"; fi
  mv "$STAGE" "$PKGS"
  STAGE=""
  [[ -z "$OLD" ]] || rm -rf "$OLD"
fi
t1=$(date +%s.%N)
export TERNFORGE_INSTALL_SECONDS="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
log "install took ${TERNFORGE_INSTALL_SECONDS} s"

# 3. The server: loads only what the manifest names, binds HOST:PORT.
REPORT="${TERNFORGE_STARTUP_REPORT:-}"
if [[ -z "$REPORT" ]]; then
  if [[ -w "$HERE" ]]; then REPORT="$HERE/evidence/startup-report.json"; else REPORT="${TMPDIR:-/tmp}/startup-report.json"; fi
fi
export PYTHONPATH="$SERVER_PATH:$PKGS" PATH="$PKGS/bin:$PATH"
# Bytecode is compiled when first imported (the install compiles none) and kept out of the source tree, so
# the later processes (vLLM's API server and engine core, the export) import about twice as fast.
export PYTHONPYCACHEPREFIX="$PKGS/.pycache"
ENGINE=(); [[ -z "${TERNFORGE_ENGINE:-}" ]] || ENGINE=(--engine "$TERNFORGE_ENGINE")
rm -rf "$TOOLS"; trap - EXIT
exec "$PY" -m ternforge_server --dir "$HERE" "${ENGINE[@]}" --device "${TERNFORGE_DEVICE:-auto}" \
  --startup-report "$REPORT" "$@"

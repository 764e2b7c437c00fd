#!/usr/bin/env bash
# bench/gpu-check.sh: the one prepared device check (issue 34), sized for one run of at most 8 minutes on one
# H100 of a stock image (torch 2.11 cu130, transformers 5.17, triton 3.6, no vLLM, no network, no node).
#
#   bench/gpu-check.sh --prepare   # here, online: the small wheels the device lacks into bench/gpu-wheels/
#   bench/gpu-check.sh             # on the GPU: preflight mini-runs at the 4B shape + the built-in engine's decode
#   bench/gpu-check.sh --tiny      # the same code path on this CPU in about a minute (the dry run; CI runs it)
#
# The GPU run installs bench/gpu-wheels/ (carried beside the tree: flash-linear-attention, fla-core, einops,
# transformers 5.24 and the few wheels it needs newer than the image's; about 24 MB) over the image's own python3
# and torch (pip --target, first on PYTHONPATH), then runs the preflight worker (python/ternforge/preflight.py)
# with the qwen3.5-4b profile's quantize section on a random model of the real config (no checkpoint, no hub),
# and bench/gpu-builtin.py (16 requests, GPU_CHECK_TOKENS new tokens each, default 1024: a measured shorter
# decode, labelled as such; the 4096-token burst is extrapolated from its step times by the preflight's report).
# One JSON result: $OUT/gpu-check.json on the device tool, else bench/results/gpu-check[-tiny].json, and beside
# it each part's own output as it is written (.events.jsonl, .preflight.log, .builtin.json, .builtin.log), which
# comes back even from a run cut off at its limit; a preflight cut off leaves the facts of its last `partial` event
# (facts_complete false), which --facts renders with a no-go row saying so. Render its table here with
#   npx tsx pipeline.ts preflight --profile qwen3.5-4b --facts bench/results/gpu-check.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels="$root/bench/gpu-wheels"
mode=gpu
for a in "$@"; do
  case "$a" in
    --tiny) mode=tiny ;;
    --prepare) mode=prepare ;;
    *) echo "usage: bench/gpu-check.sh [--tiny | --prepare]" >&2; exit 2 ;;
  esac
done

# The wheels the stock image lacks: exact pins from the CUDA workers' lock (python/requirements-cuda.lock.txt).
PINNED=(fla-core flash-linear-attention einops transformers huggingface_hub tokenizers safetensors httpx2 httpcore2 truststore hf-xet typer)
if [[ $mode == prepare ]]; then
  mkdir -p "$wheels"
  specs=()
  for n in "${PINNED[@]}"; do
    v=$(grep -iE "^${n//_/[-_]}==" "$root/python/requirements-cuda.lock.txt" | head -1 | sed -E 's/^[^=]+==([^ ;\\]+).*/\1/')
    [[ -n $v ]] || { echo "gpu-check: $n is not in python/requirements-cuda.lock.txt" >&2; exit 1; }
    specs+=("$n==$v")
  done
  PIP_CONFIG_FILE=/dev/null python3 -m pip download --quiet --no-deps --only-binary :all: --index-url https://pypi.org/simple \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --dest "$wheels" "${specs[@]}"
  du -sh "$wheels"
  exit 0
fi

started=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The interpreter: the image's own python3 on the GPU (it holds torch), the workers' venv here; GPU_CHECK_PYTHON
# names another (bench/device-image.sh passes a copy of the image's set built on this CPU).
if [[ $mode == tiny ]]; then
  python="${TERNFORGE_VENV:-$root/.ternforge/venv}/bin/python"
  [[ -x $python ]] || python=python3
  device=cpu profile=tiny shape=tiny
  result="${OUT:-$root/bench/results}/gpu-check-tiny.json"
else
  python=python3
  device=cuda profile=qwen3.5-4b shape=qwen3.5-4b
  result="${OUT:-$root/bench/results}/gpu-check.json"
fi
if [[ -n ${GPU_CHECK_PYTHON:-} ]]; then
  python=$GPU_CHECK_PYTHON
  [[ -x $python ]] || { echo "gpu-check: GPU_CHECK_PYTHON=$python is not an executable" >&2; exit 2; }
fi
# The carried wheels laid over that interpreter: pip --target into a folder put first on PYTHONPATH, so they
# shadow the image's older copies and the image's torch stays visible. Not a venv made with
# --system-site-packages: the image's python3 is itself a venv's (/opt/torch/.venv), and a venv made from it
# sees the base interpreter's site-packages, without torch. flash-linear-attention goes in a folder of its own,
# on the path of the preflight only: the CUDA workers' set has it, the submission's serving set (whose built-in
# engine gpu-builtin.py measures) does not. Here (--tiny) never fla: transformers would send CPU tensors to its
# Triton kernels.
wheel_dir="${GPU_CHECK_WHEELS:-$wheels}"
carried=() fla=()
for w in "$wheel_dir"/*.whl; do
  [[ -e $w ]] || continue
  case "$mode:$(basename "$w")" in
    tiny:fla_core-* | tiny:flash_linear_attention-*) ;;
    *:fla_core-* | *:flash_linear_attention-*) fla+=("$w") ;;
    *) carried+=("$w") ;;
  esac
done
site="" fla_site=""
overlay() {  # $1: the target folder, then the wheels
  local target=$1; shift
  "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --target "$target" "$@"
}
if (( ${#carried[@]} )); then overlay "$work/site" "${carried[@]}"; site="$work/site:"; fi
if (( ${#fla[@]} )); then overlay "$work/site-fla" "${fla[@]}"; fla_site="$work/site-fla:"; fi
if [[ $mode == gpu ]] && (( ${#carried[@]} + ${#fla[@]} == 0 )); then
  echo "gpu-check: no wheels in $wheel_dir (run bench/gpu-check.sh --prepare first): the image's transformers, no fla" >&2
fi
mkdir -p "$(dirname "$result")" "$work/model"
export PYTHONPATH="$site$root/python" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
all=("${carried[@]}" "${fla[@]}")
export GPU_CHECK_CARRIED="${all[*]##*/}"
setup_s=$(( $(date +%s) - started ))

# Each carried wheel is the copy that imports, beside the interpreter's own torch; else stop here, not minutes in.
PYTHONPATH="$fla_site$PYTHONPATH" "$python" - <<'EOF'
import os, sys
from importlib import metadata
import torch
bad = []
for w in os.environ["GPU_CHECK_CARRIED"].split():
    name, version = w.split("-")[:2]
    seen = metadata.version(name)
    if seen != version:
        bad.append(f"{name} {version} carried, {seen} imports")
if bad:
    sys.exit("gpu-check: the carried wheels do not shadow the interpreter's own: " + "; ".join(bad))
print(f"gpu-check: {sys.executable} (Python {sys.version.split()[0]}), torch {torch.__version__}, "
      f"{len(os.environ['GPU_CHECK_CARRIED'].split())} carried wheels over it", file=sys.stderr)
EOF

# The model's config.json (the tiny generator's, at the profile's shape) and the preflight worker's config.
"$python" - "$root" "$work" "$profile" "$device" "$shape" <<'EOF'
import json, sys
from pathlib import Path
from ternforge.sources.tiny import build_config, build_tokenizer, shape_named
root, work, profile, device, shape = sys.argv[1:]
tok, s = build_tokenizer(), shape_named(shape)
(Path(work) / "model" / "config.json").write_text(json.dumps(build_config(s, tok.ids, s.vocab_size or tok.vocab_size)))
q = json.loads((Path(root) / "profiles" / f"{profile}.json").read_text())["stages"]["quantize"]
q["device"] = device
cfg = {"device": device, "quantize": q, "hub": [], "model_config_dir": str(Path(work) / "model"),
       "phases": ["distill", "forward", "generate", "gptq"], "gen_tokens": 16, "gptq_tokens": 131072}
(Path(work) / "preflight.json").write_text(json.dumps(cfg))
EOF

# Each part writes beside the result as it goes (a run cut off at its limit still brings back what finished) and
# runs under its own limit, so a slow preflight still leaves the built-in engine its turn; the device tool's
# limit should be about GPU_CHECK_PREFLIGHT_S + GPU_CHECK_BUILTIN_S + 60 s (defaults: 300 + 130 + 60 = 490 s).
export PYTHONUNBUFFERED=1
part="${result%.json}"
rm -f "$part".events.jsonl "$part".preflight.log "$part".builtin.json "$part".builtin.log
t=$(date +%s)
preflight_rc=0
PYTHONPATH="$fla_site$PYTHONPATH" timeout "${GPU_CHECK_PREFLIGHT_S:-300}" "$python" -m ternforge preflight --config "$work/preflight.json" \
  > "$part.events.jsonl" 2> >(tee "$part.preflight.log" >&2) || preflight_rc=$?
preflight_s=$(( $(date +%s) - t ))

t=$(date +%s)
builtin_rc=0
if [[ $mode == tiny ]]; then tokens=(--tiny); else tokens=(--tokens "${GPU_CHECK_TOKENS:-1024}"); fi
timeout "${GPU_CHECK_BUILTIN_S:-130}" "$python" "$root/bench/gpu-builtin.py" "${tokens[@]}" --out "$part.builtin.json" \
  > "$part.builtin.log" 2>&1 || builtin_rc=$?
builtin_s=$(( $(date +%s) - t ))

PYTHONPATH="$fla_site$PYTHONPATH" "$python" - "$part" "$result" "$mode" "$root" "$setup_s" "$preflight_s" "$builtin_s" "$preflight_rc" "$builtin_rc" <<'EOF'
import json, os, sys, time
from importlib import metadata
part, result, mode, root, setup_s, preflight_s, builtin_s, preflight_rc, builtin_rc = sys.argv[1:]
def parsed(line):  # a worker cut off at its limit may leave its last line half-written
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return {}
events = [parsed(line) for line in open(part + ".events.jsonl") if line.startswith("{")]
facts = next((e["facts"] for e in events if e.get("event") == "result"), None)
complete = facts is not None
if not complete:  # cut off or failed: the facts as its last `partial` event left them (the device, the depths done)
    facts = next((e["facts"] for e in reversed(events) if e.get("event") == "partial"), None)
builtin = json.load(open(part + ".builtin.json")) if os.path.exists(part + ".builtin.json") else None
mem = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in open("/proc/meminfo")) if k in ("MemAvailable", "MemTotal")}
st = os.statvfs(root)
def v(n):
    try:
        return metadata.version(n)
    except metadata.PackageNotFoundError:
        return None
out = {"schema": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mode": mode,
       "python": {"executable": sys.executable, "version": sys.version.split()[0]},
       "versions": {n: v(n) for n in ("torch", "numpy", "transformers", "huggingface_hub", "triton",
                                      "flash-linear-attention", "fla-core")},
       "carried": os.environ["GPU_CHECK_CARRIED"].split(),
       "seconds": {"setup": int(setup_s), "preflight": int(preflight_s), "builtin": int(builtin_s)},
       # 124: cut off at its GPU_CHECK_*_S limit; the part's events or log beside this file say how far it got
       "exit_codes": {"preflight": int(preflight_rc), "builtin": int(builtin_rc)},
       "host": {"mem_available_bytes": mem["MemAvailable"], "mem_total_bytes": mem["MemTotal"],
                "disk_free_bytes": st.f_bavail * st.f_frsize, "disk_path": root},
       # false: the preflight left no result and `facts` is its last partial event (or null without one)
       "facts_complete": complete, "facts": facts, "builtin": builtin}
with open(result + ".tmp", "w") as f:
    json.dump(out, f, indent=2)
os.replace(result + ".tmp", result)
print(json.dumps({"result": result, **out["seconds"], **{f"{k}_exit": v for k, v in out["exit_codes"].items()},
                  "facts_complete": complete, "kernels_fast_path": facts and facts["kernels"]["fast_path"],
                  "builtin_tok_s": builtin and builtin["tok_s"]}))
sys.exit(1 if not complete or builtin is None or any(out["exit_codes"].values()) else 0)
EOF

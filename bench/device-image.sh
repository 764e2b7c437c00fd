#!/usr/bin/env bash
# bench/device-image.sh: bench/gpu-check.sh through a copy, built on this CPU, of the lent GPU's Python set (its
# image: Python 3.12 in a venv, torch 2.11.0, numpy 2.5.2, transformers 5.17.0, triton 3.6.0, safetensors 0.8.0,
# tokenizers 0.23.2, huggingface_hub 1.33.0), with the carried wheels of bench/gpu-wheels laid over it as on the
# GPU. First the dry run (--tiny, no fla), then the GPU run's own path as far as a CPU takes it (fla selected, no
# CUDA device). It shows before a device run is spent that the check's code installs, imports and runs on the
# image's versions. PyPI's torch 2.11 is a CUDA 13 build: about 4.8 GB in .ternforge/bench/device-image, once.
# Results: bench/results/gpu-check-device-image.json and gpu-check-device-image-gpu-path.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.ternforge/bench/device-image"
uv="$root/.ternforge/venv/bin/uv"
py312=${PYTHON312:-$(command -v python3.12 || ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
[[ -x $uv ]] || { echo "device-image: no $uv (run npx tsx pipeline.ts python-env first)" >&2; exit 2; }
[[ -n $py312 && -x $py312 ]] || { echo "device-image: no Python 3.12 found (set PYTHON312)" >&2; exit 2; }
# built once; .complete marks an install that finished (an interrupted one is rebuilt)
if [[ ! -e $venv/.complete ]]; then
  rm -rf "$venv"
  "$uv" venv -q -p "$py312" "$venv"
  "$uv" pip install -q --python "$venv/bin/python" torch==2.11.0 numpy==2.5.2 transformers==5.17.0 triton==3.6.0 \
    safetensors==0.8.0 tokenizers==0.23.2 huggingface_hub==1.33.0 pip \
    jinja2 psutil pyarrow einops  # also in the image, at versions KINDS.md does not give
  touch "$venv/.complete"
fi
compgen -G "$root/bench/gpu-wheels/*.whl" > /dev/null || bash "$root/bench/gpu-check.sh" --prepare
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
GPU_CHECK_PYTHON="$venv/bin/python" OUT="$out" bash "$root/bench/gpu-check.sh" --tiny
mkdir -p "$root/bench/results"
mv "$out/gpu-check-tiny.json" "$root/bench/results/gpu-check-device-image.json"
echo "device-image: bench/results/gpu-check-device-image.json"
# The GPU run's own path (every carried wheel, fla in the preflight's folder) as far as a CPU takes it: the
# overlay, the shadow check, the kernels' selection, then no CUDA device (exit 1, the built-in bench exit 2).
rc=0
GPU_CHECK_PYTHON="$venv/bin/python" OUT="$out" bash "$root/bench/gpu-check.sh" || rc=$?
"$venv/bin/python" - "$out/gpu-check.json" "$rc" <<'PY'
import json, sys
r, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
k = r["facts"]["kernels"]
ok = rc == 1 and r["exit_codes"] == {"preflight": 0, "builtin": 2} and k["fast_path"] and r["facts"]["mini"] is None
print(f"device-image: GPU path on this CPU: exit {rc}, kernels {k['selected']}, fast path {k['fast_path']}: "
      f"{'as expected' if ok else 'NOT as expected'}")
sys.exit(0 if ok else 1)
PY
mv "$out/gpu-check.json" "$root/bench/results/gpu-check-device-image-gpu-path.json"
echo "device-image: bench/results/gpu-check-device-image-gpu-path.json"

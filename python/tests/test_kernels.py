"""The Gated DeltaNet kernels transformers selects (ternforge/kernels.py) and the quantize worker's guard.

The CPU environment has no flash-linear-attention, so transformers takes its PyTorch delta rule here. The real
fla-core and flash-linear-attention 0.6.0 wheels (pure Python, 1.5 MB, the CUDA lock's pins) are installed into a
scratch directory from PyPI to show that transformers 5.24 selects them as soon as `fla` imports, which is what
the CUDA environment relies on, and what the probe reads back.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ternforge import kernels
from ternforge.quant import run

ROOT = Path(__file__).resolve().parents[2]


def _lock_pin(name: str) -> str:
    m = re.search(rf"^{re.escape(name)}==(\S+)", (ROOT / "python" / "requirements-cuda.lock.txt").read_text(), re.M)
    assert m, name
    return m.group(1)


def test_the_cpu_environment_takes_the_pytorch_delta_rule_and_a_cuda_run_is_refused_with_what_to_install() -> None:
    record = kernels.probe()
    assert record["selected"] == {f: kernels.TORCH for f in kernels.FUNCTIONS}
    assert record["fast_path"] is False and record["distributions"]["flash-linear-attention"] is None
    assert kernels.check_fast_path("cpu") == record
    with pytest.raises(kernels.KernelsMissing, match=r"PyTorch delta rule.*flash-linear-attention not installed.*"
                                                     r"requirements-cuda\.lock\.txt.*allow_slow_kernels"):
        kernels.check_fast_path("cuda:0")


@pytest.fixture(scope="module")
def fla_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("fla")
    pins = [f"{n}=={_lock_pin(n)}" for n in ("fla-core", "flash-linear-attention", "einops")]
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:",
                          "--target", str(target), *pins], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        pytest.fail(f"pip could not install {pins} from PyPI:\n{res.stderr[-2000:]}")
    return target


def test_transformers_selects_flash_linear_attention_when_it_imports_and_the_probe_says_so(fla_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fla_dir), str(ROOT / "python")])}
    res = subprocess.run([sys.executable, "-m", "ternforge.kernels"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    record = json.loads(res.stdout.strip().splitlines()[-1])
    assert record["distributions"]["flash-linear-attention"] == _lock_pin("flash-linear-attention")
    assert record["selected"]["chunk_gated_delta_rule"] == "fla.ops.gated_delta_rule.chunk"
    assert record["selected"]["fused_recurrent_gated_delta_rule"] == "fla.ops.gated_delta_rule.fused_recurrent"
    # causal-conv1d is not in the set: the convolution stays transformers' F.conv1d
    assert record["selected"]["causal_conv1d_fn"] == kernels.TORCH and record["fast_path"] is True


def test_quantize_on_cuda_without_a_gpu_is_refused_before_any_work(tiny_fetch_dir: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q"
    res = run.main({"method": "absmean", "group_size": 32, "device": "cuda", "model_dir": str(tiny_fetch_dir / "model"),
                    "out_dir": str(out)})
    assert res == {"ok": False} and not out.exists()
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    failure = next(e for e in events if e.get("event") == "failure")
    assert failure["reason"] == "no-cuda-device"
    assert "torch.cuda.is_available() is False" in failure["message"] and "quantize.device=cpu" in failure["message"]


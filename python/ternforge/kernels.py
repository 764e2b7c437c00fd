"""Which Gated DeltaNet kernels this environment gives transformers, and whether they run.

transformers 5.24 decides once, when `models/qwen3_5/modeling_qwen3_5.py` is imported, which implementation
each of four functions of a Gated DeltaNet layer uses (`use_kernel_func_from_hub_with_fallback`): the
`flash-linear-attention` package's (import name `fla`) for the chunked and the recurrent delta rule, the
`causal-conv1d` package's for the depthwise convolution, each only if the package imports, else its own PyTorch
code. `selected()` reads that decision back from the wrapped functions, so what is recorded is what transformers
will run, not what pip installed. `fast_path(sel)` is true when both delta rules are fla's: the rule is where the
PyTorch path spends its time (PLAN.md section 0); the convolution is a kernel-4 depthwise conv either way.

`check_fast_path(device)` is the quantize worker's guard: on a CUDA device without the fast path it raises
`KernelsMissing` with what to install, before any hour is spent.

Used by python-env (recorded in `<venv>/ternforge-env.json`, `python -m ternforge.kernels` prints it), the
preflight and the quantize worker.
"""
from __future__ import annotations

import inspect
import json
from importlib import metadata
from typing import Any

# The four functions transformers wraps, by the package that may replace them.
FUNCTIONS = {
    "chunk_gated_delta_rule": ("torch_chunk_gated_delta_rule", "fla"),
    "fused_recurrent_gated_delta_rule": ("torch_recurrent_gated_delta_rule", "fla"),
    "causal_conv1d_fn": ("causal_conv1d_fn", "causal_conv1d"),
    "causal_conv1d_update": ("causal_conv1d_update", "causal_conv1d"),
}
DISTRIBUTIONS = ("flash-linear-attention", "fla-core", "causal-conv1d", "triton")
TORCH = "torch"  # what `selected` reports for transformers' own PyTorch implementation


class KernelsMissing(RuntimeError):
    """A CUDA run would take transformers' PyTorch delta rule."""


def version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def selected() -> dict[str, str]:
    """function -> the module of the implementation transformers chose ("torch" for its own)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    out: dict[str, str] = {}
    for name, (attr, _package) in FUNCTIONS.items():
        wrapped = getattr(m, attr)
        impl = inspect.getclosurevars(wrapped).nonlocals.get("implementation")
        module = getattr(impl, "__module__", None)
        if impl is None or module is None:
            out[name] = "unknown"
        elif module == m.__name__:
            out[name] = TORCH
        else:
            out[name] = module
    return out


def fast_path(sel: dict[str, str]) -> bool:
    return all(sel[f].startswith("fla.") for f in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"))


def probe() -> dict[str, Any]:
    """The record: installed distributions, what transformers selected, and whether that is the fast path."""
    sel = selected()
    return {"distributions": {d: version_of(d) for d in DISTRIBUTIONS}, "selected": sel, "fast_path": fast_path(sel)}


def check_fast_path(device: str, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The probe (or `record`, one already taken), raising KernelsMissing when `device` is CUDA and the delta
    rule would be PyTorch's."""
    record = probe() if record is None else record
    if device.startswith("cuda") and not record["fast_path"]:
        sel = record["selected"]
        raise KernelsMissing(
            "the Gated DeltaNet layers would run transformers' PyTorch delta rule on the GPU "
            f"(chunk: {sel['chunk_gated_delta_rule']}, recurrent: {sel['fused_recurrent_gated_delta_rule']}; "
            f"flash-linear-attention {record['distributions']['flash-linear-attention'] or 'not installed'}), "
            "about 5x slower on 24 of 32 layers (PLAN.md section 0). The CUDA profiles' environment installs it: "
            "python-env with requirements python/requirements-cuda.lock.txt; to run slowly anyway, set "
            "quantize.allow_slow_kernels=true")
    return record


if __name__ == "__main__":
    print(json.dumps(probe()))

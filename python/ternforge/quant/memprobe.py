"""Peak memory of one distillation step, measured in a fresh process (`python -m ternforge.quant.memprobe`).

Builds a Qwen3.5 text model of the given width and layer types with random weights (a teacher and a
student, the student's every decoder linear a TernaryLinear from absmean codes), then runs
`distill.distill` for two steps at [batch, seq_len] tokens: the real loop (micro-batches, layer
checkpointing, chunked logits, AdamW) on the CPU. Memory is the process's peak resident set (VmHWM)
during the second step, reset after the first through /proc/self/clear_refs, minus the resident set at that
moment (the steady state: models, latents, their gradients and Adam moments): what a step adds on top. glibc is told to serve every allocation over 64 KiB by mmap
(MALLOC_MMAP_THRESHOLD_, set by `measure` for the child), so freed tensors leave the resident set at once
and the peak is the peak of live tensors, not of the allocator's arenas.

`optimizer_state_bytes` (U's gradient and two AdamW moments, the same for the scales) is reported
beside it: it is part of the steady state, not of the step's figure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

Qwen35_4B = {"hidden_size": 2560, "intermediate_size": 9216, "num_attention_heads": 16, "num_key_value_heads": 4,
             "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
             "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
"""The text model's dimensions (DESIGN.md section 4: q_proj [8192, 2560] with its output gate, k/v [1024, 2560],
in_proj_qkv [8192, 2560], in_proj_z [4096, 2560], in_proj_a/b [32, 2560], MLP 9216)."""


@dataclass(frozen=True)
class Probe:
    layers: tuple[str, ...]  # "linear_attention" / "full_attention", in order
    seq_len: int
    batch: int = 1
    micro_batch: int = 0
    checkpointing: bool = True
    dtype: str = "bfloat16"  # the models' dtype (the profile's)
    latent_dtype: str = "float32"
    vocab: int = 1024  # the head's cost is measured apart (chunked logits): a small vocabulary here
    logit_chunk: int = 1024
    dims: tuple[tuple[str, int], ...] = tuple(sorted(Qwen35_4B.items()))
    group_size: int = 32
    hidden_cos: float = 0.0  # kd.hidden_cos: every layer's hidden state of both models kept for the term


def rss_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _config(p: Probe) -> Any:
    from transformers import Qwen3_5TextConfig

    dims = dict(p.dims)
    return Qwen3_5TextConfig(vocab_size=p.vocab, num_hidden_layers=len(p.layers), layer_types=list(p.layers),
                             full_attention_interval=4, max_position_embeddings=max(4096, p.seq_len),
                             tie_word_embeddings=True, attn_output_gate=True, eos_token_id=0, dtype=p.dtype,
                             partial_rotary_factor=0.25, rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0,
                                              "partial_rotary_factor": 0.25},
                             **dims)


def eligible(name: str, mod: Any, layers_name: str, group: int) -> bool:
    """The probes' ternary linears (here and in the preflight's mini-runs): every decoder linear whose input the
    group divides, but the tiny ones (in_proj_a/b, which the float plan keeps float)."""
    import torch

    return (name.startswith(layers_name + ".") and isinstance(mod, torch.nn.Linear) and mod.in_features % group == 0
            and mod.out_features > 64)


def absmean_student(student_model: Any, group: int, latent_dtype: str) -> dict[str, Any]:
    """Install TernaryLinear students (absmean codes: the cheapest start) in every eligible linear of the model."""
    from . import absmean
    from .distill import make_student
    from .interchange import TernaryTensor
    from .model import decoder_layers

    layers_name, _ = decoder_layers(student_model)
    ternary = {}
    for name, mod in student_model.named_modules():
        if eligible(name, mod, layers_name, group):
            W_q, scale = absmean.quantize(mod.weight.detach().float(), absmean.AbsmeanConfig(group_size=group))
            ternary[name] = TernaryTensor(W_q=W_q, scale=scale, group_size=group)
    return make_student(student_model, ternary, latent_dtype)


def run(p: Probe) -> dict[str, Any]:
    """In this process: build, step once, report (see the module docstring)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    from .distill import KDConfig, distill

    torch.manual_seed(0)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[p.dtype]
    cfg = _config(p)
    teacher = Qwen3_5ForCausalLM(cfg).to(dtype).eval()
    for q in teacher.parameters():
        q.requires_grad_(False)
    student_model = Qwen3_5ForCausalLM(cfg).to(dtype)
    student_model.load_state_dict(teacher.state_dict())
    student = absmean_student(student_model, p.group_size, p.latent_dtype)
    latent_params = sum(tl.U.numel() for tl in student.values())
    scale_params = sum(tl.scale.numel() for tl in student.values())
    seqs = torch.randint(0, p.vocab, (p.batch, p.seq_len), generator=torch.Generator().manual_seed(1))
    kd = KDConfig(steps=2, batch_size=p.batch, micro_batch=p.micro_batch, grad_checkpointing=p.checkpointing,
                  latent_dtype=p.latent_dtype, logit_chunk=p.logit_chunk, checkpoint_every=2, hidden_cos=p.hidden_cos)
    import gc

    marks: dict[str, float] = {}

    def after_step(rec: dict) -> None:
        # After the first step: the steady state (models, U, scales, their gradients and Adam moments).
        if rec["step"] == 1:
            gc.collect()
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
            marks["base"] = rss_kib("VmRSS")
            marks["t"] = time.time()

    history = distill(teacher, student_model, student, seqs, kd, on_step=after_step)
    seconds = time.time() - marks["t"]
    peak = rss_kib("VmHWM")
    base = marks["base"]
    lat_bytes = torch.empty((), dtype={"float32": torch.float32, "bfloat16": torch.bfloat16}[p.latent_dtype]).element_size()
    state = 3 * latent_params * lat_bytes + 3 * scale_params * 4  # gradient of U + its 2 moments; same for scales
    step_bytes = (peak - base) * 1024
    return {"probe": {**asdict(p), "dims": dict(p.dims)}, "tokens": p.batch * p.seq_len,
            "latent_params": latent_params, "scale_params": scale_params,
            "steady_rss_bytes": base * 1024, "optimizer_state_bytes": state, "step_peak_bytes": step_bytes,
            "seconds": round(seconds, 1), "loss": history[-1]["loss"]}


def run_head(vocab: int, hidden: int, positions: int, chunk: int, dtype: str = "bfloat16") -> dict[str, Any]:
    """In this process: peak of `distill.chunked_kd_loss` forward and backward over `positions` final hidden
    states with a [vocab, hidden] head (the tied embedding, frozen, shared by teacher and student here)."""
    import gc

    import torch

    from .distill import chunked_kd_loss

    dt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    head = torch.nn.Linear(hidden, vocab, bias=False).to(dt).requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    h_s = torch.randn(positions, hidden, generator=g).to(dt).requires_grad_(True)
    h_t = torch.randn(positions, hidden, generator=g).to(dt)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    base = rss_kib("VmRSS")
    loss, _ = chunked_kd_loss(head, h_s, head, h_t, 1.0, chunk)
    loss.backward()
    peak = rss_kib("VmHWM")
    return {"vocab": vocab, "hidden": hidden, "positions": positions, "chunk": chunk, "dtype": dtype,
            "step_peak_bytes": (peak - base) * 1024}


def measure(p: Probe | dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    """`run(p)` (or `run_head(**p)` for a dict) in a fresh Python process (its peak is its own), with glibc's mmap threshold at 64 KiB."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    arg = json.dumps({**asdict(p), "dims": dict(p.dims)}) if isinstance(p, Probe) else json.dumps({"head": p})
    res = subprocess.run([sys.executable, "-m", "ternforge.quant.memprobe", arg], env=env, capture_output=True,
                         text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"memprobe failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _probe_from_json(s: str) -> Probe:
    d = json.loads(s)
    d["layers"] = tuple(d["layers"])
    d["dims"] = tuple(sorted(d["dims"].items()))
    return Probe(**d)


if __name__ == "__main__":
    arg = json.loads(sys.argv[1])
    print(json.dumps(run_head(**arg["head"]) if "head" in arg else run(_probe_from_json(sys.argv[1]))))

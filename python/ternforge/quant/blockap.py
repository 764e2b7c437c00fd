"""Block-wise reconstruction before the global distillation (EfficientQAT's Block-AP, Chen et al. 2024; the
sequential layer pass of OmniQuant and GPTQ).

For each decoder layer in order, only that layer's ternary latents U and scales train, for kd.block_steps
AdamW steps (rates kd.block_lr and kd.block_scale_lr along a half cosine over the layer's steps), on the
squared error, relative per position, between
- the student layer's output on the student's own inputs (the output of the layers before it, already
  reconstructed), and
- the teacher layer's output on the teacher's inputs,
over kd.block_sequences windows of the distillation data in batches of kd.block_batch. Per position: the
residual stream holds a few positions of huge norm (the first token's "massive activations"), and a plain mean
squared error is nearly all theirs. Measured on smol from TWN codes (README): the plain error at the
distillation's code rate (kd.lr 0.025) diverged from layer 1 on and barely moved at 3e-3; the relative one at 1e-2
fell in every layer. A step costs one
layer's forward and backward instead of the whole model's and the teacher's, so each matrix gets many updates
cheaply; the global distillation then starts from there. The cached hidden states (the teacher's input and
output and the student's input) cost 3 * block_sequences * seq_len * hidden values (smol at 256 windows of
128: 113 MB in bf16).

After its steps each layer's latents are set to their codes (`TernaryLinear.snap`: the same weights T * scale).
Left where Adam took them, 9% of smol's latents lay within 0.1 of a rounding threshold, and the distillation's
first steps at kd.lr 0.025 flipped them back and forth: its KL rose from 2.25 to 8.8 in three steps and was 3.7
after 16, against 1.2 to 1.7 from step 3 on with the latents snapped (the same codes, scales, data and settings;
README; `bench/blockap_snap.py`).

Each finished layer's U and scales are written to `work/block-ap/layer-<i>.safetensors` with a digest of the
settings, the data and the codes and scales it started from; a rerun loads them instead of training again,
so an interrupted stage loses at most the layer it was on."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..events import log
from .config import KDConfig, schedule_factor
from .hooks import capture_first_layer, run_layer
from .model import decoder_layers

BLOCK_KEYS = ("block_steps", "block_sequences", "block_batch", "block_lr", "block_scale_lr", "weight_decay", "grad_clip",
              "seed")


def block_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over positions of ||out - target||^2 / ||target||^2 (fp32)."""
    out, target = out.float(), target.float()
    return ((out - target).pow(2).sum(-1) / target.pow(2).sum(-1).clamp_min(1e-12)).mean()


def block_windows(seqs: torch.Tensor, cfg: KDConfig) -> list[torch.Tensor]:
    """kd.block_sequences windows drawn from `seqs` with kd.seed (all when there are fewer), cut to whole
    batches of kd.block_batch; refuses data that makes no batch."""
    n = min(cfg.block_sequences, seqs.shape[0])
    n -= n % cfg.block_batch
    if n <= 0:
        raise ValueError(f"block-ap: {seqs.shape[0]} windows make no batch of kd.block_batch {cfg.block_batch}")
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7)
    pick = torch.randperm(seqs.shape[0], generator=g)[:n]
    return list(seqs[pick].split(cfg.block_batch))


def _digest(cfg: KDConfig, batches: list[torch.Tensor], student: dict[str, nn.Module]) -> str:
    """Of the settings, the windows and every ternary linear's starting U and scales (GPTQ's codes)."""
    h = hashlib.sha256(json.dumps({k: getattr(cfg, k) for k in BLOCK_KEYS}, sort_keys=True).encode())
    for b in batches:
        h.update(b.numpy().tobytes())
    for name in sorted(student):
        h.update(name.encode())
        for t in (student[name].U, student[name].scale):
            h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _train_layer(layer: nn.Module, mods: list[nn.Module], x_s: list[torch.Tensor], y_t: list[torch.Tensor],
                 kwargs: dict, cfg: KDConfig, li: int) -> dict:
    opt = torch.optim.AdamW([{"params": [m.U for m in mods], "lr": cfg.block_lr},
                             {"params": [m.scale for m in mods], "lr": cfg.block_scale_lr}],
                            weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    bases = [g["lr"] for g in opt.param_groups]
    params = [p for g in opt.param_groups for p in g["params"]]
    losses = []
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 1_000 + li)
    order: list[int] = []
    layer.train()
    for step in range(cfg.block_steps):
        if not order:
            order = torch.randperm(len(x_s), generator=g).tolist()
        b = order.pop()
        f = schedule_factor("cosine", step, cfg.block_steps)
        for grp, base in zip(opt.param_groups, bases):
            grp["lr"] = base * f
        opt.zero_grad(set_to_none=True)
        loss = block_loss(run_layer(layer, x_s[b], kwargs), y_t[b])
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        for m in mods:
            m.settle()
        losses.append(float(loss.detach()))
    layer.eval()
    for m in mods:
        m.snap()  # the same codes; the distillation starts from them as from GPTQ's (see the module docstring)
    return {"first": losses[0], "last10": sum(losses[-10:]) / len(losses[-10:])}


def block_reconstruct(teacher: nn.Module, student_model: nn.Module, student: dict[str, nn.Module], seqs: torch.Tensor,
                      cfg: KDConfig, work_dir: str | Path | None = None,
                      on_layer: Callable[[int, int], None] | None = None) -> dict:
    """Block-AP over every decoder layer of `student_model`, whose ternary linears are `student` (distill's
    TernaryLinear by module name, as make_student installs them); `teacher` is the float model of the same
    architecture. Returns the report: per layer block_loss over all the training windows before and after,
    and the training loss at the first step and over the last 10."""
    if cfg.block_steps <= 0:
        return {}
    device = next(student_model.parameters()).device
    batches = block_windows(seqs, cfg)
    _, t_layers = decoder_layers(teacher)
    _, s_layers = decoder_layers(student_model)
    if len(t_layers) != len(s_layers):
        raise ValueError(f"block-ap: teacher has {len(t_layers)} decoder layers, student {len(s_layers)}")
    digest = _digest(cfg, batches, student)
    trained = {id(m) for m in student.values()}
    work = None if work_dir is None else Path(work_dir) / "block-ap"
    on_dev = [b.to(device) for b in batches]
    t_in = capture_first_layer(teacher, on_dev)
    s_in = capture_first_layer(student_model, on_dev)
    x_t, x_s = t_in.hidden, s_in.hidden
    layers = []
    for li, (tl, sl) in enumerate(zip(t_layers, s_layers)):
        y_t = _outputs(tl, x_t, t_in.kwargs[li])
        mods = {n: m for n, m in sl.named_modules() if id(m) in trained}
        rec: dict = {"layer": li, "ternary": len(mods), "before": _error(_outputs(sl, x_s, s_in.kwargs[li]), y_t)}
        if mods:
            rec.update(_layer(sl, mods, x_s, y_t, s_in.kwargs[li], cfg, li, work, digest))
        x_s = _outputs(sl, x_s, s_in.kwargs[li])  # the next layer's inputs, and this layer's error after
        rec["after"] = _error(x_s, y_t)
        x_t = y_t
        layers.append(rec)
        if on_layer is not None:
            on_layer(li + 1, len(s_layers))
    for p in student_model.parameters():
        p.grad = None  # nothing of this phase reaches the distillation's first step
    return {"windows": sum(b.shape[0] for b in batches), "digest": digest, "layers": layers}


@torch.no_grad()
def _outputs(layer: nn.Module, inputs: list[torch.Tensor], kwargs: dict) -> list[torch.Tensor]:
    return [run_layer(layer, x, kwargs) for x in inputs]


def _error(outputs: list[torch.Tensor], y_t: list[torch.Tensor]) -> float:
    """block_loss over every training batch."""
    return round(sum(float(block_loss(o, y)) for o, y in zip(outputs, y_t)) / len(y_t), 6)


def _layer(sl: nn.Module, mods: dict, x_s: list[torch.Tensor], y_t: list[torch.Tensor], kwargs: dict,
           cfg: KDConfig, li: int, work: Path | None, digest: str) -> dict:
    """One layer: loaded from its file when an earlier run of the same digest finished it, else trained
    (and then written)."""
    f, fj = (None, None) if work is None else (work / f"layer-{li}.safetensors", work / f"layer-{li}.json")
    if f is not None and f.exists() and fj.exists():
        state = json.loads(fj.read_text())
        if state.get("digest") == digest:
            tensors = load_file(str(f))
            with torch.no_grad():
                for n, m in mods.items():
                    m.U.copy_(tensors[f"{n}.U"])
                    m.scale.copy_(tensors[f"{n}.scale"])
            return {**state["record"], "resumed": True}
        log(f"block-ap: {f} is of other settings or data (digest {str(state.get('digest'))[:12]} != {digest[:12]}); "
            f"training layer {li} again")
    rec = _train_layer(sl, list(mods.values()), x_s, y_t, kwargs, cfg, li)
    if f is not None:
        work.mkdir(parents=True, exist_ok=True)
        tensors = {f"{n}.{k}": getattr(m, k).detach().cpu().contiguous() for n, m in mods.items() for k in ("U", "scale")}
        save_file(tensors, str(f.with_suffix(".tmp")))
        f.with_suffix(".tmp").replace(f)
        tmpj = fj.with_suffix(".json.tmp")
        tmpj.write_text(json.dumps({"digest": digest, "record": rec}))
        tmpj.replace(fj)
    return rec

"""Knowledge distillation of a ternary student from its full-precision teacher (Hinton et al. 2015, logit
KL at temperature tau; straight-through estimator after Bengio et al. 2013 / BitNet b1.58).

Student: the float model in which every ternary linear becomes a `TernaryLinear` holding a latent code
`U` (float32, in units of its group's scale, initialised to the GPTQ codes T in {-1, 0, 1}) and a learnable
per-group `scale` (initialised to GPTQ's). Forward weight:

    T = round(clamp(U, -1, 1)),   W = (U + (T - U).detach()) * scale      (value T * scale, STE gradient)

so dL/dU = dL/dW * scale and dL/dscale = sum over the group of dL/dW * T. U is kept in [-U_MAX, U_MAX]
after each step so a code pushed past +-1 can come back. With kd.norm_lr > 0 every norm's gain is trained
too (Norm Tweaking, Li et al. 2024: a per-channel gain before q/k/v or gate/up scales each input column of
those ternary matrices, which their per-group scales cannot), and with kd.float_lr > 0 every linear the plan
keeps float (the float budget's matrices, Qwen3.5's in_proj_a/b; never the embedding or the head): both are
written in place of the source's values, still stored and audited as float (`TunedFloat` keeps an fp32 master
of each). Everything else (embeddings, conv1d, A_log, dt_bias) is frozen at the source values.

Loss on calibration sequences, teacher logits computed on the fly (no cache); with `logit_chunk` the head and
the KL run a chunk of positions at a time (chunked_kd_loss), so full logits never exist at once:
    L = tau^2 * KL(softmax(z_t / tau) || softmax(z_s / tau))  +  hidden_mse * mean_l ||h_s,l - h_t,l||^2 / ||h_t,l||^2
        + hidden_cos * mean_l mean_positions (1 - cos(h_s,l, h_t,l))
(the cosine term is TernaryLLM's OFF, Chen et al. 2024: per position it ignores the hidden state's norm, so
the few outlier channels that dominate a squared error do not dominate it),
where the KL's mean over positions may weigh each position by 1 + stop_weight * p_t(end of turn): where an
answer ends, one position in a hundred, is where a weak student fails by looping on instead of stopping, and
at weight 1 those positions are a rounding error of the loss. The teacher decides the weight (no labels),
so positions where it would go on keep weight 1 and stopping early stays as costly as before.
With kd.onpolicy_steps N (GKD's on-policy data, Agarwal et al. 2024) the last N steps also see windows of the
student's own greedy answers to the chat requests, written when those steps start (onpolicy_sequences): the
teacher's logits over the student's text show it where to stop instead of looping on. Measured on smol (README):
more replies stop without a penalty, but perplexity and answers got worse, so it is off by default.
AdamW over U (lr), scales (scale_lr) and tuned floats (norm_lr, float_lr), at a constant rate or (`schedule:
cosine`) after `warmup` linear steps decaying along a half cosine to zero at `steps`, so the last steps settle
the codes instead of flipping them back and forth. Sequence order per epoch comes from a generator seeded with
(seed, epoch), so a run resumed from a checkpoint (safetensors: U, scales, Adam moments; JSON: step, config
digest, losses) replays exactly the batches it would have seen. With a constant rate `steps` may grow on
resume; with the cosine schedule it is part of the digest (the rate at every step depends on it).

Under a launch of N ranks (dist.py; data parallel, every rank holding the teacher and the whole student) each
step's global batch is the same rows of the same permutation as one process's; it is cut into micro-batches of
config.rank_micro_batch rows (kd.micro_batch, or batch_size / N) and rank r takes micro-batches r, r + N, ...
Each micro-batch's loss is weighed by its share of the global batch, as one process's are, and the ranks'
gradients are summed (all-reduce) before clipping: the step is one process's at that micro-batch, up to the
float rounding of the sum. (By hand, not torch's DDP wrapper: the chunked loss calls the base model and the
head apart, which the wrapper's forward would not see.) Every rank then takes the same optimizer step. Rank 0
alone writes the checkpoints (they hold no rank count) and, on resume, reads them and broadcasts them to the
others, so a run resumes at any rank count. With launch.shard `fsdp` each TernaryLinear is FSDP2's
(`fully_shard`): its U and scale, their gradients and Adam moments, are split by rows over the ranks, gathered
whole for the module's forward and backward, and the gradients reduce-scattered (FSDP's mean, times N);
checkpoints and the exported codes are gathered whole (`_whole`), and a resumed run scatters them again.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.tensor import DTensor

from ..events import log
from .chatdata import eos_ids
from .config import KDConfig, Paths, QuantizeConfig, kd_problems, rank_micro_batch, schedule_factor
from .dist import ONE, World
from .interchange import TernaryTensor

U_MAX = 1.5
NORM_PARAM = re.compile(r"norm\.weight$")  # a norm's gain (floatplan.SMALL_NAME's `norm`): input_layernorm, q_norm, ...


LATENT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def check_config(cfg: KDConfig) -> None:
    """Refuses settings the loop cannot run, before any work."""
    lr_factor(cfg, 0)
    if cfg.latent_dtype not in LATENT_DTYPES:
        raise ValueError(f"kd.latent_dtype must be one of {sorted(LATENT_DTYPES)}, not {cfg.latent_dtype!r}")
    problems = kd_problems(cfg)
    if problems:
        raise ValueError("; ".join(problems))


def lr_factor(cfg: KDConfig, step: int) -> float:
    """The learning-rate multiplier for `step` (0-based) under cfg.schedule, over cfg.steps after cfg.warmup."""
    return schedule_factor(cfg.schedule, step, cfg.steps, cfg.warmup)


def _whole(t: torch.Tensor) -> torch.Tensor:
    """`t` whole: a DTensor shard (launch.shard fsdp) gathered from every rank, which must all call it; else `t`."""
    return t.full_tensor() if isinstance(t, DTensor) else t


class TernaryLinear(nn.Module):
    def __init__(self, linear: nn.Linear, tt: TernaryTensor, latent_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.group_size = tt.group_size
        self.out_features, self.in_features = linear.weight.shape
        self.U = nn.Parameter(tt.W_q.to(latent_dtype).to(linear.weight.device).clone())
        self.scale = nn.Parameter(tt.scale.to(torch.float32).to(linear.weight.device).clone())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.compute_dtype = linear.weight.dtype
        self.frozen: torch.Tensor | None = None  # set by frozen_weights() while the student writes text

    def codes(self) -> torch.Tensor:
        return torch.round(torch.clamp(_whole(self.U.detach()), -1, 1)).to(torch.int8)

    def weight_ste(self) -> torch.Tensor:
        T = torch.round(torch.clamp(self.U, -1, 1))
        W_u = self.U + (T - self.U).detach()
        g = self.group_size
        W = W_u.reshape(self.out_features, -1, g) * self.scale.unsqueeze(-1)
        return W.reshape(self.out_features, self.in_features).to(self.compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight_ste() if self.frozen is None else self.frozen, self.bias)

    @torch.no_grad()
    def settle(self) -> None:
        """After an optimizer step: U back within [-U_MAX, U_MAX], so a code pushed past +-1 can come back, and
        every scale positive."""
        self.U.clamp_(-U_MAX, U_MAX)
        self.scale.clamp_(min=1e-8)

    @torch.no_grad()
    def snap(self) -> None:
        """U set to its codes T, where GPTQ's codes start it: a latent left near a rounding threshold (+-0.5)
        flips back and forth at the next steps' rate."""
        self.U.copy_(self.codes().to(self.U.dtype))

    def export(self) -> TernaryTensor:
        return TernaryTensor(W_q=self.codes().cpu(), scale=_whole(self.scale.detach()).float().cpu().contiguous(),
                             group_size=self.group_size)


class TunedFloat:
    """A float parameter of the student trained beside the codes at its own rate (kd.norm_lr, kd.float_lr). The
    optimizer steps an fp32 master copy; the model's own parameter (its dtype: a bf16 gain near 1 cannot take a
    step of 1e-3) gets the master's value after every step and hands its gradient to the master before it."""

    def __init__(self, param: nn.Parameter, lr: float):
        self.param = param
        self.lr = lr
        self.master = nn.Parameter(param.detach().float().clone())
        param.requires_grad_(True)

    def pull_grad(self) -> None:
        g = self.param.grad
        self.master.grad = None if g is None else g.float()
        self.param.grad = None

    def push(self) -> None:
        with torch.no_grad():
            self.param.copy_(self.master)


def tuned_names(model: nn.Module, cfg: KDConfig) -> dict[str, float]:
    """The float parameters of the student (after make_student) that cfg trains, by parameter name, with their
    rate: every norm gain at kd.norm_lr, and at kd.float_lr the weight of every nn.Linear that is still one
    (the plan's float matrices: TernaryLinear is not an nn.Linear) other than the output head, which is the
    tied embedding or the vocabulary's own float matrix. A rate of 0 trains none of its kind."""
    head = model.get_output_embeddings()
    out = {}
    if cfg.norm_lr > 0:
        out.update({n: cfg.norm_lr for n, _ in model.named_parameters() if NORM_PARAM.search(n)})
    if cfg.float_lr > 0:
        out.update({f"{n}.weight": cfg.float_lr for n, m in model.named_modules()
                    if isinstance(m, nn.Linear) and m is not head})
    return out


def tuned_floats(model: nn.Module, cfg: KDConfig) -> dict[str, TunedFloat]:
    """tuned_names' parameters made trainable, each through a TunedFloat at its rate."""
    params = dict(model.named_parameters())
    return {n: TunedFloat(params[n], lr) for n, lr in tuned_names(model, cfg).items()}


@contextmanager
def frozen_weights(student: dict[str, TernaryLinear]) -> Iterator[None]:
    """While the student generates text (no gradients): each ternary linear's weight T * scale is built once,
    not again at every forward of every new token."""
    with torch.no_grad():
        for tl in student.values():
            tl.frozen = tl.weight_ste().detach()
    try:
        yield
    finally:
        for tl in student.values():
            tl.frozen = None


def _set_module(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)


def make_student(model: nn.Module, ternary: dict[str, TernaryTensor], latent_dtype: str = "float32"
                 ) -> dict[str, TernaryLinear]:
    """Replace the named linears (module names) by TernaryLinear in place; freeze everything else."""
    for p in model.parameters():
        p.requires_grad_(False)
    mods = dict(model.named_modules())
    student: dict[str, TernaryLinear] = {}
    for name, tt in sorted(ternary.items()):
        tl = TernaryLinear(mods[name], tt, LATENT_DTYPES[latent_dtype])
        _set_module(model, name, tl)
        student[name] = tl
    return student


def _outputs(model: nn.Module, ids: torch.Tensor, hidden: bool):
    out = model(input_ids=ids, use_cache=False, output_hidden_states=hidden)
    return out.logits.float(), (out.hidden_states if hidden else None)


def _final_hidden(model: nn.Module, ids: torch.Tensor, hidden: bool):
    """The base model's normed last hidden state (no logits) and, when asked, every layer's hidden state."""
    out = model.model(input_ids=ids, use_cache=False, output_hidden_states=hidden)
    return out.last_hidden_state, (out.hidden_states if hidden else None)


def _position_terms(s_logits: torch.Tensor, t_logits: torch.Tensor, tau: float, stop_ids: Sequence[int],
                    stop_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position of [n, vocab] logits: KL(teacher || student) at tau, and its weight
    1 + stop_weight * p_teacher(any stop token) (the teacher's probabilities at tau, no gradient)."""
    s = F.log_softmax(s_logits.float() / tau, -1)
    t = F.log_softmax(t_logits.float() / tau, -1)
    kl = F.kl_div(s, t, log_target=True, reduction="none").sum(-1)
    if stop_weight > 0 and stop_ids:
        w = 1 + stop_weight * t.detach()[:, list(stop_ids)].exp().sum(-1)
    else:
        w = torch.ones_like(kl)
    return kl, w


def chunked_kd_loss(student_head: nn.Module, h_s: torch.Tensor, teacher_head: nn.Module, h_t: torch.Tensor,
                    tau: float, chunk: int, stop_ids: Sequence[int] = (), stop_weight: float = 0.0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """kd_loss over the logits of final hidden states, `chunk` positions at a time, each chunk's logits
    recomputed in the backward pass instead of kept: the full [positions, vocab] logits (8 GB per copy for
    8192 positions of a 248 k vocabulary) never exist at once. Equal to kd_loss on the full logits."""
    hs, ht = h_s.reshape(-1, h_s.shape[-1]), h_t.reshape(-1, h_t.shape[-1])

    def piece(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        kl, w = _position_terms(student_head(a), teacher_head(b), tau, stop_ids, stop_weight)
        return (w * kl).sum(), w.sum(), kl.sum()

    weighted = weights = total = torch.zeros((), device=h_s.device)
    for i in range(0, hs.shape[0], chunk):
        wk, w, k = torch.utils.checkpoint.checkpoint(piece, hs[i:i + chunk], ht[i:i + chunk], use_reentrant=False)
        weighted, weights, total = weighted + wk, weights + w, total + k
    return weighted / weights * tau * tau, total / hs.shape[0] * tau * tau


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tau: float, stop_ids: Sequence[int] = (),
            stop_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, kl): kl = tau^2 * KL(teacher || student) per position (mean over positions); loss the same
    mean weighted by 1 + stop_weight * p_teacher(stop) per position, equal to kl when stop_weight is 0."""
    kl, w = _position_terms(student_logits.reshape(-1, student_logits.shape[-1]),
                            teacher_logits.reshape(-1, teacher_logits.shape[-1]), tau, stop_ids, stop_weight)
    return (w * kl).sum() / w.sum() * tau * tau, kl.mean() * tau * tau


def hidden_loss(hs: tuple[torch.Tensor, ...], ht: tuple[torch.Tensor, ...]) -> torch.Tensor:
    terms = [((a.float() - b.float()) ** 2).mean() / (b.float() ** 2).mean().clamp(min=1e-12) for a, b in zip(hs[1:], ht[1:])]
    return torch.stack(terms).mean()


def hidden_cos_loss(hs: tuple[torch.Tensor, ...], ht: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Mean over layers (every decoder layer's output, the last one normed, as hidden_loss) and positions of
    1 - cos(student, teacher): 0 when every position points the teacher's way whatever its norm."""
    terms = [(1 - F.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-8)).mean() for a, b in zip(hs[1:], ht[1:])]
    return torch.stack(terms).mean()


def _order(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


def _batch_at(step: int, seqs: torch.Tensor, bs: int, seed: int) -> torch.Tensor:
    per_epoch = max(1, seqs.shape[0] // bs)
    epoch, k = divmod(step, per_epoch)
    idx = _order(seqs.shape[0], seed, epoch)[k * bs:(k + 1) * bs]
    return seqs[idx]


def _digest(cfg: KDConfig, seqs: torch.Tensor, student: dict[str, TernaryLinear], tuned: dict[str, TunedFloat],
            first: int = 0, last: int | None = None) -> str:
    growable = ("steps", "checkpoint_every") if cfg.schedule == "constant" else ("checkpoint_every",)
    fixed = {k: v for k, v in asdict(cfg).items() if k not in growable}  # may change on resume
    if first or (last is not None and cfg.onpolicy_steps):  # a phase: where it starts and ends
        fixed["phase"] = [first, last]
    h = hashlib.sha256(json.dumps(fixed, sort_keys=True).encode())
    h.update(seqs.numpy().tobytes())
    for name in sorted(student):
        h.update(name.encode())
    for name in sorted(tuned):
        h.update(f"tuned:{name}".encode())
    return h.hexdigest()


def _trained(student: dict[str, TernaryLinear], tuned: dict[str, TunedFloat]) -> list[tuple[str, nn.Parameter]]:
    """Every parameter the optimizer steps, by its checkpoint key."""
    out = [(f"{name}.{pname}", p) for name, tl in student.items() for pname, p in (("U", tl.U), ("scale", tl.scale))]
    return out + [(f"{name}.master", tf.master) for name, tf in sorted(tuned.items())]


def _save(work: Path, step: int, digest: str, trained: list[tuple[str, nn.Parameter]], opt: torch.optim.Optimizer,
          history: list[dict], write: bool = True) -> None:
    """Exactly what resuming needs: U and scale of every ternary linear (and the tuned floats' masters) and
    their two Adam moments, in the trained dtype, plus the step (once, in the JSON: every parameter took the
    same number of Adam steps). Sharded (fsdp) every rank gathers them and only `write` (rank 0) writes."""
    tensors: dict[str, torch.Tensor] = {}
    for key, p in trained:
        tensors[key] = _whole(p.detach()).cpu().contiguous()
        st = opt.state.get(p, {})
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                tensors[f"{key}.{k}"] = _whole(st[k].detach()).cpu().contiguous()
    if not write:
        return
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / "kd-checkpoint.safetensors.tmp"
    save_file(tensors, str(tmp))
    del tensors
    tmp.replace(work / "kd-checkpoint.safetensors")
    state = {"step": step, "digest": digest, "history": history}
    tmpj = work / "kd-checkpoint.json.tmp"
    tmpj.write_text(json.dumps(state, indent=1))
    tmpj.replace(work / "kd-checkpoint.json")


def _read(work: Path, digest: str) -> tuple[int, list[dict], dict[str, torch.Tensor]]:
    """The checkpoint in `work` when its digest is this run's: (step, history, tensors); else (0, [], {})."""
    js, st = work / "kd-checkpoint.json", work / "kd-checkpoint.safetensors"
    if not (js.exists() and st.exists()):
        return 0, [], {}
    state = json.loads(js.read_text())
    if state.get("digest") != digest:
        # Not silent: a checkpoint of other settings is discarded and the whole run starts over.
        log(f"distill: {js} is of other settings (digest {str(state.get('digest'))[:12]} != {digest[:12]}): "
            f"discarding its {state.get('step')} steps, starting at step 0")
        return 0, [], {}
    return int(state["step"]), list(state["history"]), load_file(str(st))


def _placed(world: World, p: torch.Tensor, whole: torch.Tensor | None) -> torch.Tensor:
    """Rank 0's whole tensor `whole` laid out as `p` on this rank: itself with one rank, a copy broadcast to
    every rank when `p` is replicated, this rank's shard when `p` is a DTensor."""
    if world.size == 1:
        return whole.to(p.device)
    src = whole.to(p.device) if world.reporter else torch.empty(p.shape, dtype=p.dtype, device=p.device)
    if isinstance(p, DTensor):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(src, p.device_mesh, p.placements)  # scattered from rank 0
    return world.broadcast_(src)


def _load(work: Path | None, digest: str, trained: list[tuple[str, nn.Parameter]], opt: torch.optim.Optimizer,
          world: World = ONE) -> tuple[int, list[dict]]:
    """Resume from rank 0's checkpoint: every rank gets its values of the trained tensors and their moments
    (broadcast, or scattered when sharded). Returns (step, history; other ranks: this run's, empty)."""
    step, history, tensors = _read(work, digest) if work is not None and world.reporter else (0, [], {})
    if world.size > 1:
        step = int(world.broadcast_(torch.tensor([float(step)], dtype=torch.float64, device=world.comm_device())).item())
    if step == 0:
        return 0, []
    for key, p in trained:
        v = _placed(world, p, tensors.pop(key, None))
        with torch.no_grad():
            (p.to_local() if isinstance(p, DTensor) else p.data).copy_(v.to_local() if isinstance(v, DTensor) else v)
        if world.size > 1 and world.reporter and f"{key}.exp_avg" not in tensors:
            raise RuntimeError(f"distill: the checkpoint at step {step} holds no Adam moments of {key}")
        if world.size > 1 or f"{key}.exp_avg" in tensors:
            opt.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": _placed(world, p, tensors.pop(f"{key}.exp_avg", None)),
                "exp_avg_sq": _placed(world, p, tensors.pop(f"{key}.exp_avg_sq", None)),
            }
    return step, history


def _sum_over_ranks(world: World, params: list[nn.Parameter], figures: list[float]) -> list[float]:
    """Several ranks: every rank's gradients of `params` and step figures summed (the same on every rank)."""
    if world.size == 1:
        return figures
    for p in params:
        if isinstance(p, DTensor):  # sharded (fsdp): FSDP reduce-scattered the ranks' mean (sum / N)
            if p.grad is not None:
                p.grad.mul_(world.size)  # the sum, as the replicated ranks' (exact for N a power of 2)
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        world.sum_(p.grad)
    return world.sum_(torch.tensor(figures, dtype=torch.float64, device=world.comm_device())).tolist()


def _clip_sharded(params: list[nn.Parameter], max_norm: float, world: World) -> float:
    """clip_grad_norm_ when some gradients are DTensor shards (fsdp): the 2-norm of every gradient whole (the
    shards' squares summed over ranks, the replicated ones counted once), each scaled by the same factor."""
    shards = [p.grad.to_local() for p in params if isinstance(p.grad, DTensor)]
    whole = [p.grad for p in params if p.grad is not None and not isinstance(p.grad, DTensor)]
    sq = torch.zeros((), dtype=torch.float64, device=world.comm_device())
    for g in shards:
        sq += g.double().pow(2).sum().to(sq.device)
    world.sum_(sq)
    for g in whole:
        sq += g.double().pow(2).sum().to(sq.device)
    total = float(sq.sqrt())
    coef = min(1.0, max_norm / (total + 1e-6))
    for g in shards + whole:
        g.mul_(coef)
    return total


def _shard(student: dict[str, TernaryLinear]) -> None:
    """launch.shard fsdp: each TernaryLinear's U and scale split by rows over the ranks (FSDP2 fully_shard).
    Its gradients are reduce-scattered as FSDP's mean over ranks (a sum needs gloo's missing PREMUL_SUM), which
    _sum_over_ranks turns back into the sum."""
    from torch.distributed.fsdp import fully_shard

    for tl in student.values():
        fully_shard(tl)


@contextmanager
def layer_checkpointing(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Gradient checkpointing per decoder layer (torch.utils.checkpoint, non-reentrant): a layer's forward
    keeps only its inputs for the backward pass and is recomputed there, so activations cost one hidden
    state per layer plus one layer's intermediates instead of every layer's. Exact: the recomputation runs
    the same deterministic operations on the same inputs."""
    if not enabled:
        yield
        return
    from .model import decoder_layers

    _, layers = decoder_layers(model)
    originals = []
    for layer in layers:
        fwd = layer.forward

        def wrapped(*args, _fwd=fwd, **kwargs):
            if not torch.is_grad_enabled():
                return _fwd(*args, **kwargs)
            return torch.utils.checkpoint.checkpoint(_fwd, *args, use_reentrant=False, **kwargs)

        originals.append((layer, "forward" in layer.__dict__, fwd))
        layer.forward = wrapped
    try:
        yield
    finally:
        for layer, had, fwd in originals:
            if had:
                layer.forward = fwd
            else:
                del layer.forward


def _micro_loss(teacher: nn.Module, student_model: nn.Module, ids: torch.Tensor, cfg: KDConfig, hidden: bool,
                stop: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, kl, hidden mse, hidden cosine distance) of one micro-batch, the teacher run without gradients."""
    if cfg.logit_chunk > 0:
        with torch.no_grad():
            t_last, t_hidden = _final_hidden(teacher, ids, hidden)
        s_last, s_hidden = _final_hidden(student_model, ids, hidden)
        loss, kl = chunked_kd_loss(student_model.get_output_embeddings(), s_last, teacher.get_output_embeddings(),
                                   t_last, cfg.temperature, cfg.logit_chunk, stop, cfg.stop_weight)
    else:
        with torch.no_grad():
            t_logits, t_hidden = _outputs(teacher, ids, hidden)
        s_logits, s_hidden = _outputs(student_model, ids, hidden)
        loss, kl = kd_loss(s_logits, t_logits, cfg.temperature, stop, cfg.stop_weight)
    mse = cos = torch.zeros(())
    if hidden and cfg.hidden_mse > 0:
        mse = hidden_loss(s_hidden, t_hidden)
        loss = loss + cfg.hidden_mse * mse
    if hidden and cfg.hidden_cos > 0:
        cos = hidden_cos_loss(s_hidden, t_hidden)
        loss = loss + cfg.hidden_cos * cos
    return loss, kl, mse, cos


def distill(teacher: nn.Module, student_model: nn.Module, student: dict[str, TernaryLinear], seqs: torch.Tensor,
            cfg: KDConfig, work_dir: str | Path | None = None,
            on_step: Callable[[dict], None] | None = None, first: int = 0, last: int | None = None,
            tuned: dict[str, TunedFloat] | None = None, world: World = ONE, fsdp: bool = False) -> list[dict]:
    """Train `student` (already installed in `student_model`) for cfg.steps; returns the loss history.
    `tuned` (tuned_floats: exactly the parameters tuned_names selects under cfg, none when its rates are 0)
    trains too, each at its rate.
    With `first`/`last` only steps first..last-1 of that schedule run, on `seqs` (one phase of a run whose
    data changes between phases: each phase has its own checkpoint and optimizer, the schedule is the run's).

    Each step's batch of cfg.batch_size rows runs as micro-batches of cfg.micro_batch rows whose gradients
    add up (each micro-batch's loss weighed by its share of the rows), so the effective batch is the
    profile's whatever fits in memory. With one micro-batch the step is the plain full-batch step; with
    several its loss is the mean of the micro-batches' means, which equals the full-batch mean when
    stop_weight is 0 (every position weighs 1) and is its micro-batch-weighted estimate otherwise.
    With several ranks (`world`) each runs its micro-batches of every step (module docstring); rank 0 alone
    reads and writes `work_dir`, and the history it returns is the whole run's (the others': this run's).
    `fsdp`: the ternary linears' trained state sharded over the ranks (module docstring)."""
    check_config(cfg)
    tuned = tuned or {}
    want = tuned_names(student_model, cfg)
    given = {n: tf.lr for n, tf in tuned.items()}
    if given != want:
        odd = sorted(set(given.items()) ^ set(want.items()))
        raise ValueError(f"distill: the tuned floats differ from those kd.norm_lr {cfg.norm_lr} and kd.float_lr "
                         f"{cfg.float_lr} select (tuned_floats gives them), first {odd[:3]}")
    teacher.eval()
    student_model.train()
    if fsdp:
        _shard(student)  # before the optimizer: fully_shard replaces U and scale by sharded parameters
    groups = [{"params": [tl.U for tl in student.values()], "lr": cfg.lr},
              {"params": [tl.scale for tl in student.values()], "lr": cfg.scale_lr}]
    for lr in sorted({tf.lr for tf in tuned.values()}):
        groups.append({"params": [tf.master for _, tf in sorted(tuned.items()) if tf.lr == lr], "lr": lr})
    opt = torch.optim.AdamW(
        groups,
        weight_decay=cfg.weight_decay, betas=(0.9, 0.95),
        # On a GPU the fused kernel: PyTorch's default there (foreach) makes temporaries the size of every
        # trained tensor at once (14 GB for the 4B's fp32 latents). The CPU keeps its per-tensor loop.
        **({"fused": True} if next(iter(student.values())).U.is_cuda else {}))
    last = cfg.steps if last is None else last
    if not 0 <= first <= last <= cfg.steps:
        raise ValueError(f"distill: steps {first}..{last} are not within the schedule's {cfg.steps}")
    digest = _digest(cfg, seqs, student, tuned, first, last)
    trained = _trained(student, tuned)
    work = Path(work_dir) if work_dir is not None else None
    step, history = _load(work, digest, trained, opt, world)
    for tf in tuned.values():
        tf.push()  # a resumed run's masters into the model
    step = max(step, first)
    device = next(iter(student.values())).U.device
    hidden = cfg.hidden_mse > 0 or cfg.hidden_cos > 0
    stop = sorted(eos_ids(teacher)) if cfg.stop_weight > 0 else []
    bases = [g["lr"] for g in opt.param_groups]
    mb = rank_micro_batch(cfg, world.size)
    params = [p for _, p in trained]
    with layer_checkpointing(student_model, cfg.grad_checkpointing):
        while step < last:
            for g, base in zip(opt.param_groups, bases):
                g["lr"] = base * lr_factor(cfg, step)
            batch = _batch_at(step - first, seqs, cfg.batch_size, cfg.seed)
            parts = world.mine(list(batch.split(mb)))
            opt.zero_grad(set_to_none=True)
            loss_v = kl_v = mse_v = cos_v = 0.0
            for part in parts:
                loss, kl, mse, cos = _micro_loss(teacher, student_model, part.to(device), cfg, hidden, stop)
                share = part.shape[0] / batch.shape[0]
                (loss if share == 1 else loss * share).backward()
                loss_v += float(loss.detach()) * share
                kl_v += float(kl.detach()) * share
                mse_v += float(mse.detach()) * share
                cos_v += float(cos.detach()) * share
                del loss, kl, mse, cos
            for tf in tuned.values():
                tf.pull_grad()
            loss_v, kl_v, mse_v, cos_v = _sum_over_ranks(world, params, [loss_v, kl_v, mse_v, cos_v])
            gnorm = (math.nan if cfg.grad_clip <= 0 else _clip_sharded(params, cfg.grad_clip, world) if fsdp
                     else float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)))
            opt.step()
            for tl in student.values():
                tl.settle()
            for tf in tuned.values():
                tf.push()
            step += 1
            rec = {"step": step, "loss": loss_v, "kl": kl_v, "hidden_mse": mse_v, "hidden_cos": cos_v, "grad_norm": gnorm,
                   "lr": opt.param_groups[0]["lr"]}
            history.append(rec)
            if on_step is not None:
                on_step(rec)
            if work is not None and (world.reporter or fsdp) and (step % cfg.checkpoint_every == 0 or step == last):
                _save(work, step, digest, trained, opt, history, write=world.reporter)
    opt.zero_grad(set_to_none=True)
    student_model.eval()
    return history


@dataclass
class KDData:
    """The distillation's data: its windows, what went into them, and the chat requests and transcripts."""

    seqs: torch.Tensor  # [n, kd.seq_len] ids
    info: dict
    requests: list[str]
    transcripts: list[list[int]]


def kd_sequences(teacher: nn.Module, model_dir: str | Path, calib_dir: str | Path, k: KDConfig, eos: int,
                 device: str = "cpu", on_progress: Callable[[int, int, str], None] | None = None,
                 world: World = ONE) -> KDData:
    """The distillation windows of k.seq_len tokens: k.sequences windows of calibration text (all when None)
    and windows over teacher-written chat transcripts (chatdata.py) of k.chat_max_new tokens at most per
    answer: k.chat_prompts requests about calibration snippets and k.chat_self_prompts requests the teacher
    writes itself (sampled with k.seed, each begun with one of k.chat_self_openers in turn). `teacher`: the
    float model, or a generator of its text (vllm_teacher.VllmGenerator).
    `on_progress(done, total, what)` follows each batch of self-written requests and of answers. Several
    ranks split the teacher's batches and each ends with every transcript (chatdata.py)."""
    from ..calib.tokens import load_role, sequences
    from .chatdata import answer, load_tokenizer, self_requests, snippet_requests, windows

    docs = load_role(calib_dir, "calibration")
    text = sequences(docs, k.seq_len, k.sequences, eos)
    info: dict = {"text_windows": int(text.shape[0]), "seq_len": k.seq_len}
    if k.chat_prompts + k.chat_self_prompts <= 0:
        return KDData(text, info, [], [])
    tok = load_tokenizer(model_dir)

    def report(what: str) -> Callable[[int, int], None] | None:
        return None if on_progress is None else (lambda done, total: on_progress(done, total, what))

    requests = snippet_requests(docs, tok, k.chat_prompts) if k.chat_prompts else []
    written = self_requests(teacher, tok, k.chat_self_prompts, k.seed, device=device,
                            on_progress=report("kd: teacher-written requests"),
                            openers=k.chat_self_openers, world=world) if k.chat_self_prompts else []
    transcripts, stopped = answer(teacher, tok, requests + written, k.chat_max_new, device=device,
                                  on_progress=report("kd: teacher transcripts (answers)"), world=world)
    chat = windows(transcripts, k.seq_len)
    info.update({"chat_transcripts": len(transcripts), "chat_windows": int(chat.shape[0]),
                 "chat_tokens": sum(len(t) for t in transcripts), "chat_stopped": stopped})
    if k.chat_self_prompts:
        info.update({"chat_self_written": len(written), "chat_self_examples": written[:12]})
    return KDData(torch.cat([text, chat]), info, requests + written, transcripts)


def onpolicy_sequences(student_model: nn.Module, student: dict[str, TernaryLinear], model_dir: str | Path,
                       requests: list[str], seqs: torch.Tensor, k: KDConfig, device: str = "cpu",
                       on_progress: Callable[[int, int, str], None] | None = None,
                       world: World = ONE) -> tuple[torch.Tensor, dict]:
    """The windows of the on-policy phase: `seqs` (the windows so far) plus windows over the student's own
    greedy answers to the same chat requests (GKD's on-policy data, Agarwal et al. 2024). The teacher's
    logits over the student's text are the targets, so where the student loops on and the teacher would end
    its answer (stop_weight weighs those positions) the student learns to stop, which text the teacher wrote
    never shows it (exposure bias). Deterministic: greedy answers of the student as it is."""
    from .chatdata import answer, load_tokenizer, windows

    tok = load_tokenizer(model_dir)
    student_model.eval()
    with frozen_weights(student):
        transcripts, stopped = answer(student_model, tok, requests, k.chat_max_new, device=device,
                                      on_progress=None if on_progress is None else
                                      (lambda done, total: on_progress(done, total, "kd: student transcripts (on-policy)")),
                                      world=world)
    mine = windows(transcripts, k.seq_len)
    info = {"transcripts": len(transcripts), "stopped": stopped, "windows": int(mine.shape[0]),
            "tokens": sum(len(t) for t in transcripts)}
    return torch.cat([seqs, mine]), info


class StepProgress:
    """on_step for `distill`: hands each record to `sink` with the steps' total and an estimate of the time
    left from the steps this run has done (a resumed run starts counting at its first step)."""

    def __init__(self, total: int, sink: Callable[[dict], None]):
        self.total, self.sink = total, sink
        self.t0 = time.monotonic()
        self.first: int | None = None

    def __call__(self, rec: dict) -> None:
        if self.first is None:
            self.first = rec["step"] - 1
        per_step = (time.monotonic() - self.t0) / max(1, rec["step"] - self.first)
        self.sink({**rec, "total": self.total, "seconds_left": round(per_step * (self.total - rec["step"]), 1)})


def run_gptq_kd(prep, cfg: QuantizeConfig, paths: Paths,
                on_layer: Callable[[int, int], None] | None = None,
                on_step: Callable[[dict], None] | None = None,
                on_progress: Callable[[int, int, str], None] | None = None, world: World = ONE,
                seconds: dict[str, float] | None = None
                ) -> tuple[dict[str, TernaryTensor], dict, dict[str, torch.Tensor]]:
    """A fresh full-precision teacher writes the data (kd_sequences), GPTQ initialises the codes (gptq.run_gptq;
    on calibration text plus gptq.chat_windows windows of the teacher's transcripts), Block-AP (blockap.py;
    when kd.block_steps > 0) reconstructs each layer on the data, and distillation follows; returns the
    codes by source name, the report's figures and the tuned floats (fp32, by source name; empty when
    kd.norm_lr and kd.float_lr are 0). `on_step` gets each step's record plus `total` and `seconds_left`;
    `on_progress(done, total, what)` follows the teacher's transcripts and Block-AP's layers. With several
    ranks (`world`) GPTQ, distillation and the chat transcripts (the teacher's, the on-policy student's) split
    their batches; Block-AP runs whole on every rank (its layers are sequential and its steps take one batch
    each; rank 0's result is broadcast, and it alone keeps its layer checkpoints). `seconds` gets
    this rank's seconds per phase."""
    from ternforge_server.loader import model_name_for

    from . import vllm_teacher
    from .blockap import block_reconstruct
    from .calibration import chat_calibration, eos_of
    from .gptq import run_gptq
    from .model import DTYPES, load_float_model

    k = cfg.kd
    check_config(k)
    # The teacher writes the data first: GPTQ may fit on windows of its transcripts too (gptq.chat_windows).
    # Through vLLM, before the float teacher is loaded for distillation (vllm_teacher.py), where it runs.
    chat = k.chat_prompts + k.chat_self_prompts > 0
    engine, why = vllm_teacher.choose(k.chat_engine, world) if chat else ("transformers", "no chat requests")
    data = None
    if engine == "vllm":
        gen = vllm_teacher.VllmGenerator(paths.model_dir, vllm_teacher.stop_ids(paths.model_dir),
                                         max_model_len=vllm_teacher.context_for(paths.model_dir, k), dtype=cfg.dtype,
                                         device=cfg.device, seed=k.seed)
        try:
            data = kd_sequences(gen, paths.model_dir, paths.calib_dir, k, eos_of(prep.model), cfg.device, on_progress,
                                world)
        finally:
            gen.close()
    teacher = load_float_model(paths.model_dir, DTYPES[cfg.dtype], cfg.device)
    for p in teacher.parameters():
        p.requires_grad_(False)
    if data is None:
        data = kd_sequences(teacher, paths.model_dir, paths.calib_dir, k, eos_of(prep.model), cfg.device, on_progress,
                            world)
    if chat:
        data.info["chat_engine"] = {"engine": engine, "reason": why}
    seqs = world.share(data.seqs)  # one data set for every rank, should generation differ between devices
    chat_windows = 0
    if cfg.gptq.chat_windows:
        cal = cfg.calibration
        chat_cal = chat_calibration(data.transcripts, cfg.gptq.chat_windows, cal.seq_len, cal.batch_size)
        chat_windows = sum(b.shape[0] for b in chat_cal)
        log(f"gptq: {chat_windows} windows of the teacher's transcripts join {sum(b.shape[0] for b in prep.batches)} "
            f"of calibration text (gptq.chat_windows {cfg.gptq.chat_windows})")
        prep.batches = prep.batches + [b.to(cfg.device) for b in chat_cal]
    seconds = {} if seconds is None else seconds
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[name] = now - clock
        clock = now

    lap("teacher_data_s")
    init, report = run_gptq(prep, cfg, on_layer, world)
    lap("gptq_s")
    if cfg.gptq.chat_windows:
        report["gptq_chat_windows"] = chat_windows
    s2m = {s: m for m, s in prep.m2s.items()}
    student = make_student(prep.model, {s2m[s]: tt for s, tt in init.items()}, k.latent_dtype)
    tuned = tuned_floats(prep.model, k)
    p2s = {model_name_for(s): s for s in prep.shapes}
    unmapped = sorted(n for n in tuned if n not in p2s)
    if unmapped:
        raise ValueError(f"distill: tuned floats with no source tensor: {unmapped[:5]}")
    initial = {n: tf.master.detach().clone() for n, tf in tuned.items()}
    blocks = block_reconstruct(teacher, prep.model, student, seqs, k, paths.work_dir if world.reporter else None,
                               None if on_progress is None else
                               (lambda done, total: on_progress(done, total, "kd: block-ap layers")))
    if world.size > 1:  # every rank from rank 0's layers, should a device's kernels not be bitwise deterministic
        for _, p in _trained(student, tuned):
            world.broadcast_(p.data)
        for tf in tuned.values():
            tf.push()
    lap("block_ap_s")
    progress = StepProgress(k.steps, on_step) if on_step is not None else None
    if not k.onpolicy_steps:
        history = distill(teacher, prep.model, student, seqs, k, paths.work_dir, progress, tuned=tuned, world=world,
                          fsdp=cfg.launch.shard == "fsdp")
    else:
        # Two phases of one schedule: teacher-written data, then the same plus the student's own answers.
        switch = k.steps - k.onpolicy_steps
        work = Path(paths.work_dir) if paths.work_dir is not None else None
        history = distill(teacher, prep.model, student, seqs, k, None if work is None else work / "phase-1",
                          progress, first=0, last=switch, tuned=tuned, world=world)
        seqs, data.info["onpolicy"] = onpolicy_sequences(prep.model, student, paths.model_dir, data.requests, seqs,
                                                         k, cfg.device, on_progress, world)
        onpolicy = data.info["onpolicy"]
        onpolicy["at_step"] = switch
        log(f"distill: at step {switch} the student stopped by itself in {onpolicy['stopped']} of "
            f"{onpolicy['transcripts']} answers; {onpolicy['windows']} windows of them join the data")
        history += distill(teacher, prep.model, student, seqs, k, None if work is None else work / "phase-2",
                           progress, first=switch, last=k.steps, tuned=tuned, world=world)
    lap("distill_s")
    out = {prep.m2s[m]: tl.export() for m, tl in student.items()}
    floats = {p2s[n]: tf.master.detach().cpu().contiguous() for n, tf in tuned.items()}
    # How far each tuned float moved from the source's values: ||new - old|| / ||old||.
    moved = {p2s[n]: round(float((tf.master.detach() - initial[n]).norm() / initial[n].norm().clamp_min(1e-12)), 6)
             for n, tf in sorted(tuned.items())}
    first = history[0]["kl"] if history else None
    last = sum(r["kl"] for r in history[-10:]) / len(history[-10:]) if history else None
    report = {**report, "kd": {**asdict(k), "first_kl": first, "last10_kl": last, "steps_done": len(history),
                               "data": data.info, "tuned_floats": moved, "block_ap": blocks}}
    return out, report, floats

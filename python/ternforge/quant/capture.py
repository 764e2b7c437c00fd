"""Activation capture and the layer-by-layer driver that GPTQ, the sensitivity pass and the data-free
references share.

A causal LM from transformers is a stack of decoder layers (`...layers`, an nn.ModuleList). The driver:
1. runs the float model once per calibration batch up to the first decoder layer and keeps its inputs, and
   records the keyword arguments every layer receives (masks, rotary embeddings; identical for every batch
   because all batches have one shape and no padding);
2. for each layer in turn: groups its linear modules by shared input (q/k/v read one tensor, o_proj
   another, ...), and for each group in forward order captures the group's inputs with forward hooks on the
   layer whose earlier groups are already quantized (true-sequential GPTQ), quantizes the group, writes the
   dequantized weights back into the module;
3. runs the quantized layer on its inputs to produce the next layer's inputs.

Module names are mapped to the source checkpoint's tensor names by the part from `layers.` on (the
checkpoint may say `model.language_model.layers.3...` where the loaded text model says `model.layers.3...`).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .allocate import Allocation


@dataclass(frozen=True)
class TernaryTensor:
    """What a quantize method returns for a ternary tensor; the interchange writer stores it."""

    W_q: torch.Tensor  # int8 [out, in] in {-1, 0, 1}
    scale: torch.Tensor  # float32 [out, in / group_size]
    group_size: int


class _StopForward(Exception):
    pass


def set_deterministic(seed: int) -> None:
    """Same inputs, seed and device -> same bytes."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=False)


def source_tensor_names(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Every tensor of the source checkpoint with its shape, from its safetensors headers."""
    from safetensors import safe_open

    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    names: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(model_dir / f), framework="pt") as sf:
            for k in sf.keys():
                names[k] = tuple(sf.get_slice(k).get_shape())
    return names


def load_float_model(model_dir: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> nn.Module:
    """The full-precision text-only causal LM from a fetch-model `model/` directory, built the way the
    server's loader builds the packed one (same class, same name mapping, tied head shared), so the two
    differ only in their weights."""
    from safetensors import safe_open

    from ternforge_server.loader import _rebuild_meta_buffers, build_empty_model, model_name_for, read_config

    model_dir = Path(model_dir)
    config, family = read_config(model_dir)
    model = build_empty_model(config, family)
    params = dict(model.named_parameters(remove_duplicate=False))
    index = model_dir / "model.safetensors.index.json"
    where = (json.loads(index.read_text())["weight_map"] if index.exists()
             else {k: "model.safetensors" for k in source_tensor_names(model_dir)})
    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(set(where.values())):
        with safe_open(str(model_dir / shard), framework="pt") as f:
            for name in f.keys():
                target = model_name_for(name)
                if target in params:
                    weights[target] = f.get_tensor(name).to(device=device, dtype=dtype)
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    emb_name = next(n for n, p in params.items() if p is emb.weight)
    for n, p in params.items():
        if n not in weights and head is not None and p is head.weight:
            weights[n] = weights[emb_name]  # tied head, stored once in the checkpoint
    missing = sorted(n for n in params if n not in weights)
    if missing:
        raise ValueError(f"{model_dir}: {len(missing)} model parameters not in the checkpoint: {missing[:5]}")
    shared: dict[int, nn.Parameter] = {}
    for n in params:
        w = weights[n]
        p = shared.setdefault(id(w), nn.Parameter(w, requires_grad=False))
        mod_name, _, attr = n.rpartition(".")
        model.get_submodule(mod_name)._parameters[attr] = p
    _rebuild_meta_buffers(model, torch.device(device))
    model.config.use_cache = False
    return model.eval()


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The decoder layer stack: the longest nn.ModuleList named `...layers` outside any vision tower."""
    best: tuple[str, nn.ModuleList] | None = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and name.endswith("layers") and "visual" not in name and "mtp" not in name:
            if best is None or len(mod) > len(best[1]):
                best = (name, mod)
    if best is None:
        raise ValueError("no decoder layer list (`...layers`) found in the model")
    return best


def _suffix(name: str) -> str | None:
    i = name.find("layers.")
    return name[i:] if i >= 0 else None


def module_to_source(model: nn.Module, source: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Linear module name in the loaded model -> source weight name (e.g. `...layers.3.mlp.up_proj.weight`)."""
    by_suffix: dict[str, str] = {}
    for k in source:
        s = _suffix(k)
        if s is not None and "visual" not in k and not k.startswith("mtp"):
            by_suffix[s] = k
    out: dict[str, str] = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        s = _suffix(name + ".weight")
        if s is None or s not in by_suffix:
            continue
        src = by_suffix[s]
        if tuple(mod.weight.shape) != tuple(source[src]):
            raise ValueError(f"{name}: shape {tuple(mod.weight.shape)} differs from source {src} {source[src]}")
        out[name] = src
    return out


@dataclass
class LayerInputs:
    """Inputs of one decoder layer for every calibration batch, plus its keyword arguments."""

    hidden: list[torch.Tensor]
    kwargs: list[dict]  # per layer index


def capture_first_layer(model: nn.Module, batches: list[torch.Tensor]) -> LayerInputs:
    _, layers = decoder_layers(model)
    kwargs: list[dict] = [dict() for _ in layers]
    hidden: list[torch.Tensor] = []

    def record_kwargs(i: int):
        def hook(_mod, args, kw):
            kw = dict(kw)
            for k in ("cache", "past_key_values", "past_key_value"):
                if k in kw:
                    kw[k] = None
            kw["use_cache"] = False
            kwargs[i] = {"__args__": tuple(args[1:]), **kw}
        return hook

    handles = [layer.register_forward_pre_hook(record_kwargs(i), with_kwargs=True) for i, layer in enumerate(layers)]
    with torch.no_grad():
        model(input_ids=batches[0], use_cache=False)
    for h in handles:
        h.remove()

    def stop(_mod, args, kw):
        hidden.append(args[0].detach() if args else kw["hidden_states"].detach())
        raise _StopForward

    h = layers[0].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        with torch.no_grad():
            for ids in batches:
                try:
                    model(input_ids=ids, use_cache=False)
                except _StopForward:
                    pass
    finally:
        h.remove()
    return LayerInputs(hidden=hidden, kwargs=kwargs)


def run_layer(layer: nn.Module, hidden: torch.Tensor, kwargs: dict) -> torch.Tensor:
    kw = dict(kwargs)
    args = kw.pop("__args__", ())
    out = layer(hidden, *args, **kw)
    return out[0] if isinstance(out, tuple) else out


def linear_groups(layer: nn.Module, names: Iterable[str], hidden: torch.Tensor, kwargs: dict) -> list[list[str]]:
    """The layer's linears (local names in `names`) grouped by shared input, in forward order."""
    wanted = set(names)
    order: list[tuple[str, int]] = []
    alive: list[torch.Tensor] = []  # keeps every seen input alive, so no two of them can share an id()
    handles = []

    def hook(name: str):
        def fn(_m, inp, _out):
            alive.append(inp[0])
            order.append((name, id(inp[0])))
        return fn

    for name, mod in layer.named_modules():
        if name in wanted:
            handles.append(mod.register_forward_hook(hook(name)))
    with torch.no_grad():
        run_layer(layer, hidden, kwargs)
    for h in handles:
        h.remove()
    groups: list[list[str]] = []
    key_of: dict[int, int] = {}
    for name, key in order:
        if key not in key_of:
            key_of[key] = len(groups)
            groups.append([])
        if name not in groups[key_of[key]]:
            groups[key_of[key]].append(name)
    return groups


def capture_group(layer: nn.Module, group: list[str], inputs: LayerInputs, li: int,
                  sink: Callable[[str, torch.Tensor], None]) -> None:
    """Feed every batch's inputs of the modules in `group` to `sink(name, x)`; stops each forward early."""
    mods = dict(layer.named_modules())
    seen: set[str] = set()

    def hook(name: str):
        def fn(_m, inp, _out):
            sink(name, inp[0].detach())
            seen.add(name)
            if seen >= set(group):
                raise _StopForward
        return fn

    handles = [mods[n].register_forward_hook(hook(n)) for n in group]
    try:
        with torch.no_grad():
            for hidden in inputs.hidden:
                seen.clear()
                try:
                    run_layer(layer, hidden, inputs.kwargs[li])
                except _StopForward:
                    pass
    finally:
        for h in handles:
            h.remove()


def sequential(model: nn.Module, batches: list[torch.Tensor], ternary: dict[str, str],
               quantize_group: Callable[[list[tuple[str, nn.Linear]], Callable[[Callable[[str, torch.Tensor], None]], None]], dict[str, TernaryTensor]],
               on_layer: Callable[[int, int], None] | None = None) -> dict[str, TernaryTensor]:
    """Layer-by-layer driver. `ternary` maps module names to source names (the tensors to quantize).

    `quantize_group(modules, feed)` gets the group's (full name, module) pairs and `feed(sink)`, which
    replays the group's inputs over all calibration batches into `sink(full_name, x)`; it returns a
    TernaryTensor per full module name. The driver writes the dequantized weights into the modules.
    """
    layers_name, layers = decoder_layers(model)
    inputs = capture_first_layer(model, batches)
    out: dict[str, TernaryTensor] = {}
    all_mods = dict(model.named_modules())
    for li, layer in enumerate(layers):
        prefix = f"{layers_name}.{li}."
        local = [n[len(prefix):] for n in ternary if n.startswith(prefix)]
        if local:
            mods = dict(layer.named_modules())
            for group in linear_groups(layer, local, inputs.hidden[0], inputs.kwargs[li]):
                def feed(sink: Callable[[str, torch.Tensor], None], group: list[str] = group) -> None:
                    capture_group(layer, group, inputs, li, lambda n, x: sink(prefix + n, x))
                done = quantize_group([(prefix + n, mods[n]) for n in group], feed)
                for full, tt in done.items():
                    mod = all_mods[full]
                    W_r = (tt.W_q.float().reshape(tt.W_q.shape[0], -1, tt.group_size) * tt.scale.unsqueeze(-1))
                    mod.weight.data.copy_(W_r.reshape(mod.weight.shape).to(mod.weight.dtype))
                    out[full] = tt
        with torch.no_grad():
            inputs.hidden = [run_layer(layer, h, inputs.kwargs[li]) for h in inputs.hidden]
        if on_layer is not None:
            on_layer(li + 1, len(layers))
    return out


def input_energy(model: nn.Module, batches: list[torch.Tensor], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """diag(H) / 2 per linear: the mean of x_j^2 over calibration tokens, float32 [in]. One float forward."""
    wanted = set(names)
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    handles = []

    def hook(name: str):
        def fn(_m, inp, _out):
            x = inp[0].detach().reshape(-1, inp[0].shape[-1]).float()
            sums[name] = sums.get(name, torch.zeros(x.shape[1])) + (x * x).sum(0).cpu()
            counts[name] = counts.get(name, 0) + x.shape[0]
        return fn

    for name, mod in model.named_modules():
        if name in wanted:
            handles.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            for ids in batches:
                model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {n: sums[n] / counts[n] for n in sums}


# --- model-level runners: what the quantize command's method table calls ---------------------------------

@dataclass
class Prepared:
    """Everything a method needs: the float model, calibration batches, and the float budget's plan."""

    model: nn.Module
    batches: list[torch.Tensor]
    shapes: dict[str, tuple[int, ...]]
    m2s: dict[str, str]  # linear module name -> source tensor name
    allocation: "Allocation"
    group_size: int

    def ternary_modules(self) -> dict[str, str]:
        """Module name -> source name of every linear the plan makes ternary."""
        plan = self.allocation.plan
        return {m: s for m, s in self.m2s.items() if plan.get(s) == "ternary"}


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def calibration_batches(calib_dir: str | Path, eos_id: int, cfg: dict, role: str = "calibration") -> list[torch.Tensor]:
    from ..calib.tokens import batches, load_role, sequences

    seqs = sequences(load_role(calib_dir, role), int(cfg.get("seq_len", 256)), int(cfg.get("sequences", 64)), eos_id)
    return batches(seqs, int(cfg.get("batch_size", 8)))


def prepare(model_dir: str | Path, calib_dir: str | Path | None, params: dict) -> Prepared:
    from .allocate import AllocConfig, allocate, twn_output_error

    set_deterministic(int(params.get("seed", 0)))
    g = int(params.get("group_size", 32))
    device = params.get("device", "cpu")
    model = load_float_model(model_dir, _dtype(params.get("dtype", "float32")), device)
    shapes = source_tensor_names(model_dir)
    m2s = module_to_source(model, shapes)
    eos = model.config.eos_token_id
    eos = int(eos[0] if isinstance(eos, list) else (eos if eos is not None else 0))
    batches = calibration_batches(calib_dir, eos, params.get("calibration", {})) if calib_dir else []
    batches = [b.to(device) for b in batches]
    acfg = params.get("allocation", {})
    alloc_config = AllocConfig(group_size=g, target_fraction=float(acfg.get("target_fraction", 0.955)),
                               min_relative_score=float(acfg.get("min_relative_score", 2.0)))
    scores: dict[str, float] = {}
    if batches and acfg.get("sensitivity", True):
        energy = input_energy(model, batches, m2s)
        mods = dict(model.named_modules())
        for m, s in m2s.items():
            if m in energy and shapes[s][1] % g == 0:
                scores[s] = twn_output_error(mods[m].weight.detach(), energy[m], g)
    allocation = allocate(shapes, alloc_config, scores)
    return Prepared(model=model, batches=batches, shapes=shapes, m2s=m2s, allocation=allocation, group_size=g)


def _report(prep: Prepared, method: str, extra: dict | None = None) -> dict:
    a = prep.allocation
    return {"method": method, "group_size": prep.group_size, "ternary_fraction": a.fraction,
            "forced_float": len(a.forced_float), "chosen_float": a.chosen_float, **(extra or {})}


def run_none(prep: Prepared) -> tuple[dict[str, TernaryTensor], dict]:
    """The float baseline: nothing ternary."""
    return {}, {"method": "none"}


def run_twn(prep: Prepared, params: dict) -> tuple[dict[str, TernaryTensor], dict]:
    from . import twn

    cfg = twn.TWNConfig(group_size=prep.group_size, search=params.get("twn", {}).get("search", "exact"))
    mods = dict(prep.model.named_modules())
    out = {}
    for m, s in sorted(prep.ternary_modules().items(), key=lambda kv: kv[1]):
        W_q, scale = twn.quantize(mods[m].weight.detach(), cfg)
        out[s] = TernaryTensor(W_q=W_q.cpu(), scale=scale.cpu(), group_size=prep.group_size)
    return out, _report(prep, "twn")


def run_gptq(prep: Prepared, params: dict,
             on_layer: Callable[[int, int], None] | None = None) -> tuple[dict[str, TernaryTensor], dict]:
    """Sequential GPTQ over the real model; the float model in `prep` ends up holding the quantized weights."""
    from .gptq import GPTQ, GPTQConfig

    p = params.get("gptq", {})
    cfg = GPTQConfig(group_size=prep.group_size, blocksize=int(p.get("blocksize", 128)),
                     percdamp=float(p.get("percdamp", 0.1)), actorder=bool(p.get("actorder", True)),
                     scale_search=p.get("scale_search", "exact"))
    if not prep.batches:
        raise ValueError("gptq needs calibration batches (fetch-calib's calibration role)")
    ternary = prep.ternary_modules()
    rel_errs: dict[str, float] = {}

    def quantize_group(mods: list[tuple[str, nn.Linear]], feed) -> dict[str, TernaryTensor]:
        gptq = {name: GPTQ(mod.weight) for name, mod in mods}
        feed(lambda name, x: gptq[name].add_batch(x))
        done = {}
        for name, mod in mods:
            res = gptq[name].fasterquant(mod.weight, cfg)
            gptq[name].free()
            rel_errs[ternary[name]] = res.rel_err
            done[name] = TernaryTensor(W_q=res.W_q.cpu(), scale=res.scale.cpu(), group_size=prep.group_size)
        return done

    got = sequential(prep.model, prep.batches, ternary, quantize_group, on_layer)
    out = {ternary[m]: tt for m, tt in got.items()}
    return out, _report(prep, "gptq", {"gptq_rel_err": rel_errs, "actorder": cfg.actorder})


def export_interchange(model_dir: str | Path, out_dir: str | Path, ternary: dict[str, TernaryTensor], method: str,
                       base_model: str, revision: str) -> dict:
    """Write the quantize -> pack interchange (one file): every source tensor, the ternary ones as I8 codes
    plus `.scale`, the rest as their source data. Uses the interchange module's writer and exempt rule."""
    from safetensors import safe_open

    from . import interchange
    from .interchange import DTYPE_NAMES, PlannedTensor
    from .policy import Encoding, classify

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    index = model_dir / "model.safetensors.index.json"
    where = (json.loads(index.read_text())["weight_map"] if index.exists()
             else {k: "model.safetensors" for k in source_tensor_names(model_dir)})
    fname = interchange.file_name(1, 1)
    data: dict[str, torch.Tensor] = {}
    entries: dict[str, dict] = {}
    for name in sorted(where):
        with safe_open(str(model_dir / where[name]), framework="pt") as f:
            W = f.get_tensor(name)
        exempt = classify(name, tuple(W.shape), 4).exempt
        tt = ternary.get(name)
        enc = Encoding.TERNARY if tt is not None else Encoding.FLOAT
        planned = PlannedTensor(name=name, shape=tuple(W.shape), dtype=DTYPE_NAMES[W.dtype], encoding=enc,
                                group_size=tt.group_size if tt is not None else None, exempt=exempt,
                                element_size=W.element_size())
        if tt is not None:
            data[name], data[f"{name}.scale"] = tt.W_q.contiguous(), tt.scale.float().contiguous()
        else:
            data[name] = W
        entries[name] = interchange.index_entry(planned, fname)
    interchange.write_file(out_dir / fname, data)
    return interchange.write_index(out_dir, base_model, revision, method, [fname], entries)


MODEL_METHODS = ("none", "twn", "gptq", "gptq+kd")


def quantize_model(config: dict) -> dict:
    """The quantize command for the model-level methods (MODEL_METHODS): float budget plan from calibration
    sensitivities, the method, then the interchange plus quantize_report.json in `out_dir`.

    Config: the quantize command's (model_dir, out_dir, method, group_size, source_json) plus calib_dir
    (fetch-calib's output), work_dir (distillation checkpoints; survives an interrupted stage), seed, device,
    dtype, calibration {seq_len, sequences, batch_size}, allocation {target_fraction, min_relative_score,
    sensitivity}, gptq {blocksize, percdamp, actorder, scale_search}, kd {steps, lr, scale_lr, temperature,
    hidden_mse, batch_size, seq_len, sequences, checkpoint_every}.
    """
    import time

    from ..events import emit
    from .distill import run_gptq_kd

    method = str(config["method"])
    if method not in MODEL_METHODS:
        raise ValueError(f"{method!r} is not a model-level method ({', '.join(MODEL_METHODS)})")
    model_dir, out_dir = Path(config["model_dir"]), Path(config["out_dir"])
    source_json = Path(config.get("source_json") or model_dir.parent / "source.json")
    origin = json.loads(source_json.read_text())["origin"] if source_json.exists() else {}
    t0 = time.time()
    calib_dir = config.get("calib_dir") if method != "none" else None
    prep = prepare(model_dir, calib_dir, config)

    def on_layer(done: int, total: int) -> None:
        emit("progress", done=done, total=total, what=f"{method}: layer")

    def on_step(rec: dict) -> None:
        emit("loss", **rec)
        emit("progress", done=rec["step"], total=rec["total"],
             what=f"gptq+kd: distillation step, loss {rec['loss']:.4g}, about {rec['seconds_left']:.0f} s left")

    def on_progress(done: int, total: int, what: str) -> None:
        emit("progress", done=done, total=total, what=what)

    runners = {
        "none": lambda: run_none(prep),
        "twn": lambda: run_twn(prep, config),
        "gptq": lambda: run_gptq(prep, config, on_layer),
        "gptq+kd": lambda: run_gptq_kd(prep, {**config, "model_dir": str(model_dir), "calib_dir": str(calib_dir)},
                                       config.get("work_dir"), on_layer, on_step, on_progress),
    }
    ternary, report = runners[method]()
    export_interchange(model_dir, out_dir, ternary, method, str(origin.get("base_model", model_dir.name)),
                       str(origin.get("revision", "unknown")))
    a = prep.allocation
    # The report is an output: it holds no timings (same inputs, same bytes); the time goes in the result event.
    full = {**report, "method": method,
            "allocation": {"ternary_fraction": a.fraction if method != "none" else 0.0,
                           "forced_float": a.forced_float, "chosen_float": a.chosen_float,
                           "scores": a.scores},
            "ternary_tensors": sorted(ternary)}
    (out_dir / "quantize_report.json").write_text(json.dumps(full, indent=2, sort_keys=True, default=float) + "\n")
    return {"ok": True, "method": method, "ternary_tensors": len(ternary),
            "ternary_fraction": full["allocation"]["ternary_fraction"], "seconds": round(time.time() - t0, 1)}

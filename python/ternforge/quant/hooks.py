"""Activation capture with forward hooks, and the layer-by-layer driver that GPTQ and the sensitivity pass
share.

A causal LM from transformers is a stack of decoder layers (`...layers`, an nn.ModuleList). The driver:
1. runs the float model once per calibration batch up to the first decoder layer and keeps its inputs, and
   records the keyword arguments every layer receives (masks, rotary embeddings; identical for every batch
   because all batches have one shape and no padding);
2. for each layer in turn: groups its linear modules by shared input (q/k/v read one tensor, o_proj
   another, ...), and for each group in forward order captures the group's inputs with forward hooks on the
   layer whose earlier groups are already quantized (true-sequential GPTQ), quantizes the group, writes the
   dequantized weights back into the module;
3. runs the quantized layer on its inputs to produce the next layer's inputs.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .interchange import TernaryTensor
from .model import decoder_layers


class _StopForward(Exception):
    pass


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

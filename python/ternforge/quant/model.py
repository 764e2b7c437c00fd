"""The full-precision model the calibrated methods work on: the source checkpoint's tensor list, the float
text model built the way the server's loader builds the packed one, its decoder layer stack, and the map
from its linear modules to the checkpoint's tensor names.

Module names are mapped to the source checkpoint's tensor names by the part from `layers.` on (the
checkpoint may say `model.language_model.layers.3...` where the loaded text model says `model.layers.3...`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ternforge_server.contract import is_exempt_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
        if s is not None and not is_exempt_name(k):
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

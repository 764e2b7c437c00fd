"""`tiny`: a deterministic generated checkpoint laid out exactly like Qwen/Qwen3.5-4B, small enough for CI.

Same tensor names and kinds as the real checkpoint (`model.language_model.*` with Gated DeltaNet and gated
full-attention layers in the 3:1 pattern, SwiGLU MLPs, zero-centred RMSNorms, tied embedding and head;
`model.visual.*`; the one-layer `mtp.*` head that transformers' own state dict lacks), a config.json of the
same structure, bf16 like the real one. Every `in` of a linear layer is a multiple of 64, so g=32 and g=64
both divide it. Same seed, same bytes: each tensor is drawn from its own numpy PCG64 stream keyed by
(seed, tensor name), independent of order.

The same generator at the real width (`SHAPES["qwen3.5-4b"]`: Qwen3.5-4B's config.json values, vocabulary
248,320) writes the full-size random checkpoint of the CPU rehearsal (`npm run bench:rehearsal`), as a
directory with a REVISION file that fetch-model's local mode copies like a hub snapshot:

    python -m ternforge.sources.tiny snapshot --shape qwen3.5-4b [--layers N] --out DIR [--seed 0]
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..events import emit, log, progress
from .checkpoint import TensorSpec, write_json, write_sharded, write_source_record, write_text
from .tiny_tokenizer import build_tokenizer, chat_template, tokenizer_config

GENERATOR = "ternforge-tiny-qwen3.5"
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class TinyShape:
    """The free dimensions of the tiny model; everything else follows Qwen3.5-4B's ratios and layout."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    full_attention_interval: int = 4
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 32
    linear_value_head_dim: int = 32
    linear_conv_kernel_dim: int = 4
    vision_depth: int = 2
    vision_hidden_size: int = 64
    vision_intermediate_size: int = 128
    vision_num_heads: int = 2
    vision_num_position_embeddings: int = 64
    vocab_size: int | None = None  # None: the tiny tokenizer's own vocabulary
    mrope_section: tuple[int, int, int] | None = None  # None: derived from head_dim


# Qwen/Qwen3.5-4B's config.json values (DESIGN.md section 4; the vision tower as transformers' Qwen3.5 default).
QWEN35_4B = TinyShape(
    hidden_size=2560,
    intermediate_size=9216,
    num_hidden_layers=32,
    full_attention_interval=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    vision_depth=27,
    vision_hidden_size=1152,
    vision_intermediate_size=4304,
    vision_num_heads=16,
    vision_num_position_embeddings=2304,
    vocab_size=248320,
    mrope_section=(11, 11, 10),
)

SHAPES: dict[str, TinyShape] = {"tiny": TinyShape(), "qwen3.5-4b": QWEN35_4B}


def shape_named(name: str, layers: int | None = None) -> TinyShape:
    """A named shape, optionally with fewer (or more) text layers; the 3:1 layer pattern is kept."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; known: {sorted(SHAPES)}")
    shape = SHAPES[name]
    if layers is not None:
        if layers < 1:
            raise ValueError(f"--layers must be at least 1, got {layers}")
        shape = dataclasses.replace(shape, num_hidden_layers=layers)
    return shape


def build_config(shape: TinyShape, token_ids: dict[str, int], vocab_size: int) -> dict[str, Any]:
    """config.json with the structure of Qwen3.5-4B's (text_config, vision_config, layer_types, rope_parameters)."""
    s = shape
    layer_types = [
        "full_attention" if (i + 1) % s.full_attention_interval == 0 else "linear_attention" for i in range(s.num_hidden_layers)
    ]
    rotary_half = s.head_dim // 4 // 2  # partial_rotary_factor 0.25; mrope sections split the rotary half
    mrope = list(s.mrope_section) if s.mrope_section else [rotary_half - 2 * (rotary_half // 3), rotary_half // 3, rotary_half // 3]
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "image_token_id": token_ids["<|image_pad|>"],
        "model_type": "qwen3_5",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "attn_output_gate": True,
            "dtype": "bfloat16",
            "eos_token_id": token_ids["<|endoftext|>"],
            "full_attention_interval": s.full_attention_interval,
            "head_dim": s.head_dim,
            "hidden_act": "silu",
            "hidden_size": s.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": s.intermediate_size,
            "layer_types": layer_types,
            "linear_conv_kernel_dim": s.linear_conv_kernel_dim,
            "linear_key_head_dim": s.linear_key_head_dim,
            "linear_num_key_heads": s.linear_num_key_heads,
            "linear_num_value_heads": s.linear_num_value_heads,
            "linear_value_head_dim": s.linear_value_head_dim,
            "mamba_ssm_dtype": "float32",
            "max_position_embeddings": 262144,
            "model_type": "qwen3_5_text",
            "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False,
            "num_attention_heads": s.num_attention_heads,
            "num_hidden_layers": s.num_hidden_layers,
            "num_key_value_heads": s.num_key_value_heads,
            "rms_norm_eps": 1e-06,
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": mrope,
                "partial_rotary_factor": 0.25,
                "rope_theta": 10000000,
                "rope_type": "default",
            },
            "use_cache": True,
            "vocab_size": vocab_size,
        },
        "tie_word_embeddings": True,
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_config": {
            "deepstack_visual_indexes": [],
            "depth": s.vision_depth,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": s.vision_hidden_size,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": s.vision_intermediate_size,
            "model_type": "qwen3_5",
            "num_heads": s.vision_num_heads,
            "num_position_embeddings": s.vision_num_position_embeddings,
            "out_hidden_size": s.hidden_size,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        "vision_end_token_id": token_ids["<|vision_end|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
    }


def generation_config(token_ids: dict[str, int]) -> dict[str, Any]:
    eot, im_end = token_ids["<|endoftext|>"], token_ids["<|im_end|>"]
    return {
        "bos_token_id": eot,
        "do_sample": True,
        "eos_token_id": [im_end, eot],
        "pad_token_id": eot,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    }


def _full_attention_specs(prefix: str, s: TinyShape) -> list[tuple[str, tuple[int, ...]]]:
    h = s.hidden_size
    return [
        (f"{prefix}input_layernorm.weight", (h,)),
        (f"{prefix}post_attention_layernorm.weight", (h,)),
        (f"{prefix}self_attn.q_proj.weight", (2 * s.num_attention_heads * s.head_dim, h)),  # query and gate
        (f"{prefix}self_attn.k_proj.weight", (s.num_key_value_heads * s.head_dim, h)),
        (f"{prefix}self_attn.v_proj.weight", (s.num_key_value_heads * s.head_dim, h)),
        (f"{prefix}self_attn.o_proj.weight", (h, s.num_attention_heads * s.head_dim)),
        (f"{prefix}self_attn.q_norm.weight", (s.head_dim,)),
        (f"{prefix}self_attn.k_norm.weight", (s.head_dim,)),
        (f"{prefix}mlp.gate_proj.weight", (s.intermediate_size, h)),
        (f"{prefix}mlp.up_proj.weight", (s.intermediate_size, h)),
        (f"{prefix}mlp.down_proj.weight", (h, s.intermediate_size)),
    ]


def mtp_specs(s: TinyShape) -> list[tuple[str, tuple[int, ...]]]:
    """The MTP head's tensors as Qwen3.5/Qwen3-Next checkpoints name them (transformers drops them on load)."""
    h = s.hidden_size
    return [
        ("mtp.fc.weight", (h, 2 * h)),
        ("mtp.norm.weight", (h,)),
        ("mtp.pre_fc_norm_embedding.weight", (h,)),
        ("mtp.pre_fc_norm_hidden.weight", (h,)),
        *_full_attention_specs("mtp.layers.0.", s),
    ]


def tensor_specs(config: dict[str, Any], s: TinyShape) -> list[TensorSpec]:
    """Names and shapes of every tensor: the model's own state dict (built on the meta device, so no
    hand-kept table can drift from transformers), minus the tied head, plus the MTP head. Sorted by name."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(**config))
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items() if name != "lm_head.weight"}
    shapes.update(dict(mtp_specs(s)))
    return [TensorSpec(name, shapes[name], torch.bfloat16) for name in sorted(shapes)]


def _rng(seed: int, name: str) -> np.random.Generator:
    key = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, key])))


# How each tensor kind is drawn, first match wins: (pattern, kind).
_KINDS: tuple[tuple[str, str], ...] = (
    (r"\.A_log$", "a_log"),
    (r"\.dt_bias$", "dt_bias"),
    (r"linear_attn\.norm\.weight$", "one_centred"),  # gated RMSNorm multiplies by w directly
    (r"^model\.visual\..*norm\d?\.weight$", "one_centred"),  # vision LayerNorms
    (r"^model\.visual\.merger\.norm\.weight$", "one_centred"),
    (r"norm\.weight$|layernorm\.weight$|norm_embedding\.weight$|norm_hidden\.weight$", "zero_centred"),
    (r"\.bias$", "bias"),
    (r"embed_tokens\.weight$|pos_embed\.weight$", "embedding"),
    (r"", "fan_in"),
)


# Values are drawn in chunks of this many, so a full-width tensor (the 635M-value embedding) never has a
# float64 copy in memory; a PCG64 stream drawn in chunks yields the same values as in one call.
_CHUNK = 1 << 24


def _values(kind: str, rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "a_log":
        return np.log(rng.uniform(1.0, 16.0, n))
    x = rng.standard_normal(n)
    if kind in ("dt_bias", "one_centred"):
        return 1.0 + 0.1 * x
    if kind == "zero_centred":
        return 0.1 * x
    if kind == "bias":
        return 0.02 * x
    if kind == "embedding":
        return 0.5 * x
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return x / np.sqrt(fan_in)


def draw(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """One tensor's values: a pure function of (seed, name, shape)."""
    kind = next(k for pattern, k in _KINDS if re.search(pattern, name))
    rng = _rng(seed, name)
    n = int(np.prod(shape))
    out = torch.empty(n, dtype=torch.bfloat16)
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        out[start : start + m] = torch.from_numpy(_values(kind, rng, m, shape).astype(np.float32)).to(torch.bfloat16)
    return out.reshape(shape)


def generate(out_dir: Path, seed: int = 0, max_shard_bytes: int = 2_000_000, shape: TinyShape = TinyShape()) -> dict[str, Any]:
    """Write `<out_dir>/model/` and `<out_dir>/source.json`. Returns the source record."""
    model_dir = out_dir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    config = build_config(shape, tok.ids, shape.vocab_size or tok.vocab_size)
    specs = tensor_specs(config, shape)
    log(f"tiny: {len(specs)} tensors, vocab {tok.vocab_size}, hidden {shape.hidden_size}, layers {shape.num_hidden_layers}")

    write_json(model_dir / "config.json", config)
    write_json(model_dir / "generation_config.json", generation_config(tok.ids))
    write_text(model_dir / "tokenizer.json", tok.to_json())
    write_json(model_dir / "tokenizer_config.json", tokenizer_config(tok))
    write_text(model_dir / "chat_template.jinja", chat_template())
    stream = ((spec.name, draw(spec.name, spec.shape, seed)) for spec in specs)
    write_sharded(model_dir, specs, stream, max_shard_bytes, on_tensor=lambda d, t, n: progress(d, t, n) if d % 25 == 0 or d == t else None)

    import transformers

    origin = {
        "kind": "generator",
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "base_model": f"{GENERATOR}-seed{seed}",
        "revision": f"v{GENERATOR_VERSION}-seed{seed}",
        "layout_of": "Qwen/Qwen3.5-4B",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    return write_source_record(out_dir, origin, extra={"chat_template": "chat_template.jinja"})


def main(config: dict[str, Any]) -> dict[str, Any]:
    out_dir = Path(config["out_dir"])
    record = generate(out_dir, seed=int(config.get("seed", 0)), max_shard_bytes=int(config.get("max_shard_bytes", 2_000_000)))
    emit("files", files=record["files"])
    return {"source": "tiny", "tensor_count": record["tensor_count"], "total_size": record["total_size"], "origin": record["origin"]}


def snapshot_revision(shape: TinyShape, seed: int) -> str:
    """A 40-hex id of what the generator writes (its version, the shape, the seed): the snapshot's REVISION."""
    key = {"generator": GENERATOR, "version": GENERATOR_VERSION, "shape": dataclasses.asdict(shape), "seed": seed}
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def snapshot(out_dir: Path, shape: TinyShape, seed: int, max_shard_bytes: int) -> dict[str, Any]:
    """Generate into `<out_dir>/model/` plus a REVISION file, so fetch-model's local mode copies it like a hub
    snapshot. An existing complete snapshot of the same revision is kept (the generator is deterministic)."""
    revision = snapshot_revision(shape, seed)
    model_dir = out_dir / "model"
    marker = model_dir / "REVISION"
    if marker.is_file() and marker.read_text(encoding="utf-8").strip() == revision and (out_dir / "source.json").is_file():
        record = json.loads((out_dir / "source.json").read_text(encoding="utf-8"))
        log(f"tiny snapshot: {model_dir} already holds revision {revision}")
        reused = True
    else:
        marker.unlink(missing_ok=True)
        record = generate(out_dir, seed=seed, max_shard_bytes=max_shard_bytes, shape=shape)
        write_text(marker, revision + "\n")  # last: its presence means the snapshot is complete
        reused = False
    return {"model_dir": str(model_dir), "revision": revision, "tensor_count": record["tensor_count"],
            "total_size": record["total_size"], "reused": reused}


def _cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m ternforge.sources.tiny")
    sub = ap.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("snapshot", help="write a generated checkpoint as a local snapshot directory with a REVISION file")
    sp.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    sp.add_argument("--layers", type=int, default=None, help="text layers (default: the shape's own)")
    sp.add_argument("--out", required=True, type=Path)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--max-shard-bytes", type=int, default=4_000_000_000)
    args = ap.parse_args(argv)
    try:
        shape = shape_named(args.shape, args.layers)
    except ValueError as e:
        ap.error(str(e))
    emit("result", **snapshot(args.out, shape, args.seed, args.max_shard_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))

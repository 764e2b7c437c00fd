"""A tiny submission-like directory for the server tests: real files, real packing, real model class.

`build_submission(out_dir)` writes what the loader reads in a real submission:
    config.json                  composite Qwen3.5 config (text_config + a small vision_config), tied embeddings
    tokenizer.json, tokenizer_config.json, chat_template.jinja   byte-level BPE with Qwen's specials and <think>
    quantization_manifest.json   exactly per schemas/manifest.schema.json
    weights/model-0000{1,2}-of-00002.safetensors   <name>.codes U8, <name>.scale F32, floats under their names

The model is a randomly initialised `Qwen3_5ForCausalLM` (hidden 128, 4 layers: 3 Gated DeltaNet + 1 full
attention), its linear weights quantized by absmean per group of 32 and packed with the project's reference
`pack_2bit`; names are the real checkpoint's (`model.language_model.*`), plus exempt vision/MTP tensors that
the server must skip. Nothing here runs at import time.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import torch

from ternforge_server.contract import MANIFEST_FORMAT, MANIFEST_PACKING

GROUP_SIZE = 32
CLOSING_PHRASE = "Considering the limited time, I have to give the solution based on the thinking directly now."
TEXT_PREFIX = "model.language_model."
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]  # added tokens, not special (as in Qwen's tokenizer): they survive decode
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
# Words the BPE is trained on, so prompts in tests tokenize compactly.
_CORPUS_WORDS = (
    "the answer is a number question think about it step by step first second then final so we "
    "compute add multiply divide which of following options correct choose A B C D answer: boxed "
    "code python def return print function list sum value hello world you are helpful assistant "
    "user system tell me story once upon time there was cat dog sat on mat what is two plus three"
).split()


def text_config_dict(vocab_size: int, max_positions: int = 262144) -> dict:
    """The text config, mirroring Qwen3.5-4B's fields at a tiny size (3:1 linear/full attention); the context
    (`max_positions`) is Qwen3.5-4B's own unless a test needs a model that allows less than the server's default."""
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        "eos_token_id": 2,
        "dtype": "bfloat16",
    }


def build_tokenizer(out_dir: Path) -> int:
    """Train a small byte-level BPE with Qwen's special tokens; returns the vocabulary size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=448,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [" ".join(_CORPUS_WORDS[i:] + _CORPUS_WORDS[:i]) for i in range(len(_CORPUS_WORDS))]
    lines += [CLOSING_PHRASE] * 8  # the controller's closing phrase tokenizes compactly, as in Qwen's vocabulary
    tok.train_from_iterator(lines, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return tok.get_vocab_size()


def _absmean_ternary(w: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Trivial absmean per group: scale = mean |w| over the group, t = round(clip(w / scale, -1, 1))."""
    out, cols = w.shape
    wg = w.float().reshape(out, cols // g, g)
    scale = wg.abs().mean(dim=-1).clamp_min(1e-8)
    t = (wg / scale.unsqueeze(-1)).round().clamp(-1, 1).to(torch.int8)
    return t.reshape(out, cols), scale.to(torch.float32)


def _is_ternary_target(name: str, t: torch.Tensor) -> bool:
    small = ("in_proj_a", "in_proj_b", "conv1d", "A_log", "dt_bias", "norm", "embed_tokens")
    return t.dim() == 2 and t.shape[1] % GROUP_SIZE == 0 and not any(s in name for s in small)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_submission(out_dir: str | os.PathLike, seed: int = 0, max_positions: int = 262144) -> Path:
    """Write the fixture submission into out_dir (created); returns its path."""
    from safetensors.torch import save_file
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from ternforge_server.packing import pack_2bit

    out = Path(out_dir)
    (out / "weights").mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out)
    text_cfg = text_config_dict(vocab, max_positions)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**{k: v for k, v in text_cfg.items() if k != "model_type"}))
    # Wider random weights than the default init: sharper logits, so greedy argmax has clear margins.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.1 if "embed_tokens" in name else 0.25)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}

    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_cfg,
        "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 32, "num_heads": 2,
                          "intermediate_size": 64, "out_hidden_size": 128},
        "tie_word_embeddings": True,
        "image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 7, "vision_end_token_id": 8,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    shards: dict[str, dict[str, torch.Tensor]] = {"weights/model-00001-of-00002.safetensors": {},
                                                  "weights/model-00002-of-00002.safetensors": {}}
    shard_names = list(shards)
    tensors: dict[str, dict] = {}
    for i, (local, w) in enumerate(sorted(state.items())):
        name = TEXT_PREFIX + local[len("model."):]
        shard = shard_names[0] if "layers.0." in name or "layers.1." in name or "embed" in name else shard_names[1]
        entry: dict = {"shape": list(w.shape), "dtype": "BF16", "shard": shard}
        if _is_ternary_target(name, w):
            t, scale = _absmean_ternary(w, GROUP_SIZE)
            shards[shard][name + ".codes"] = pack_2bit(t).contiguous()
            shards[shard][name + ".scale"] = scale.contiguous()
            entry.update(encoding="packed_2bit", group_size=GROUP_SIZE,
                         codes_key=name + ".codes", scale_key=name + ".scale")
        else:
            shards[shard][name] = w.to(torch.bfloat16).contiguous()
            entry.update(encoding="float", data_key=name)
        if local == "model.embed_tokens.weight":
            entry["tied_to"] = ["lm_head.weight"]
        tensors[name] = entry
    # Exempt tensors: stored for completeness, never loaded by the server.
    for name, shape in (("model.visual.patch_embed.proj.weight", [32, 3, 2, 4, 4]), ("mtp.fc.weight", [128, 256])):
        shards[shard_names[1]][name] = torch.randn(shape).to(torch.bfloat16)
        tensors[name] = {"encoding": "float", "shape": shape, "dtype": "BF16", "shard": shard_names[1],
                         "data_key": name, "exempt": True}

    shard_list = []
    for rel, content in shards.items():
        save_file(content, str(out / rel), metadata={"format": "pt"})
        shard_list.append({"file": rel, "size": (out / rel).stat().st_size, "sha256": _sha256(out / rel)})
    manifest = {
        "format": MANIFEST_FORMAT,
        "base_model": "ternforge/tiny-qwen3.5",
        "revision": "fixture",
        "method": "absmean-g32 (test fixture)",
        "packing": dict(MANIFEST_PACKING),  # schemas/contract.json's convention
        "shards": shard_list,
        "tensors": tensors,
    }
    (out / "quantization_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def rewrite_manifest(sub: Path, edit) -> None:
    """Apply `edit(manifest_dict)` to the fixture's manifest in place (for negative tests)."""
    path = sub / "quantization_manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m ternforge_server` on the fixture, as a real child process; stderr kept in a file."""

    def __init__(self, sub: Path, log_path: Path, *extra: str, port: int | None = None,
                 extra_env: dict | None = None, prefix: list[str] | None = None) -> None:
        import subprocess
        import sys

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.report_path = log_path.with_suffix(".startup.json")
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HOST="127.0.0.1",
                   PORT=str(self.port), MODEL_NAME="ternforge-tiny", TOKENIZERS_PARALLELISM="false")
        env.update(extra_env or {})  # the caller's additions win
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "ternforge_server", "--dir", str(sub), "--device", "cpu",
             "--startup-report", str(self.report_path), *extra],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 180.0) -> None:
        import time
        import urllib.request

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        # What outlives it in its own session: a prefix (bwrap) that exited before the server and its upstream.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()


def http(url: str, body: object | bytes | None = None, method: str | None = None, timeout: float = 120):
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


FAKE_VLLM_SERVER = """
# A stand-in for vLLM's OpenAI server (tests only): records what the controller started it with, then exits 1
# as a vLLM that failed its start-up would, so the controller falls back to the built-in engine.
import json, os, sys
argv = sys.argv[1:]
model = argv[argv.index("--model") + 1]
names = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME",
         "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE")
record = {"argv": argv, "env": {k: os.environ.get(k) for k in names},
          "config": json.load(open(os.path.join(model, "config.json"))), "files": sorted(os.listdir(model))}
with open(os.environ["TERNFORGE_TEST_FAKE_VLLM_OUT"], "w") as f:
    json.dump(record, f)
sys.stderr.write("fake vLLM: recorded the start-up, exiting 1\\n")
sys.exit(1)
"""


def fake_vllm(site: Path) -> Path:
    """A `vllm` package that imports (version 0.19.1) and whose OpenAI server records its argv, environment
    and the checkpoint's config.json in $TERNFORGE_TEST_FAKE_VLLM_OUT, then exits 1. Returns `site`, for
    PYTHONPATH."""
    pkg = site / "vllm"
    (pkg / "entrypoints" / "openai").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('__version__ = "0.19.1"\n')
    (pkg / "entrypoints" / "__init__.py").write_text("")
    (pkg / "entrypoints" / "openai" / "__init__.py").write_text("")
    (pkg / "entrypoints" / "openai" / "api_server.py").write_text(FAKE_VLLM_SERVER)
    return site

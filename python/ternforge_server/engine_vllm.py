"""vLLM as an optional engine on a GPU, behind the same controller. UNTESTED here (no vLLM, no GPU).

Start-up dequantizes the packed codes through the server's own loader (W = (c - 1) * scale), writes the text
model as a bf16 checkpoint (text_config only, names `model.*`, a tied head stored once), and starts vLLM's
async engine on it. `try_vllm` returns None (the caller logs and falls back to the built-in engine) when vLLM
is not importable, there is no GPU, or vLLM fails to start. vLLM's own OpenAI server and its reasoning parser
are never used, so its `content: null` cannot reach a client: the controller builds every reply.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from .engine import GenerationStream, Sampling


def _log(msg: str) -> None:
    sys.stderr.write(f"[vllm] {msg}\n")
    sys.stderr.flush()


def write_bf16_text_checkpoint(sub: Path, out: Path) -> dict:
    """Dequantize through load_model and save a plain HF text-only checkpoint; returns the load report."""
    import torch
    from safetensors.torch import save_file

    from .loader import load_model

    model, tokenizer, report = load_model(sub, "cuda", torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not (model.config.tie_word_embeddings and k == "lm_head.weight")}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["architectures"] = [type(model).__name__]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    tokenizer.save_pretrained(str(out))
    del model
    torch.cuda.empty_cache()
    return report.to_json()


class VllmEngine:
    """generate(ids, max_new, stop_ids, deadline, sampling) -> GenerationStream, on vLLM's AsyncLLM."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self._n = 0

    def generate(self, ids: list[int], max_new: int, stop_ids: Iterable[int] = (), deadline: float | None = None,
                 sampling: Sampling = Sampling()) -> GenerationStream:
        from vllm import SamplingParams

        stream = GenerationStream()
        self._n += 1
        rid = f"tf-{self._n}"
        params = SamplingParams(max_tokens=max_new, temperature=sampling.temperature, top_p=sampling.top_p,
                                seed=sampling.seed, presence_penalty=sampling.presence_penalty,
                                frequency_penalty=sampling.frequency_penalty, stop_token_ids=list(stop_ids),
                                detokenize=False)

        async def pump() -> None:
            sent = 0
            try:
                async for out in self.llm.generate({"prompt_token_ids": list(ids)}, params, rid):
                    toks = out.outputs[0].token_ids
                    for t in toks[sent:]:
                        if t in stop_ids:
                            stream._finish("stop", stop_token=t)
                            return
                        stream._push(int(t))
                    sent = len(toks)
                    if stream.cancelled or (deadline is not None and time.monotonic() >= deadline):
                        await self.llm.abort(rid)
                        stream._finish("cancelled" if stream.cancelled else "deadline")
                        return
                    if out.finished:
                        reason = out.outputs[0].finish_reason
                        stream._finish("stop" if reason == "stop" else "length")
                        return
            except Exception as e:
                stream._finish("error", error=repr(e))

        asyncio.get_running_loop().create_task(pump())
        return stream

    def shutdown(self) -> None:
        shutdown = getattr(self.llm, "shutdown", None)
        if shutdown:
            shutdown()


def try_vllm(sub: Path, device: Any, args: Any) -> tuple[Any, Any, dict] | None:
    """(engine, tokenizer, report) or None when vLLM cannot run here."""
    if device.type != "cuda":
        _log("no GPU")
        return None
    try:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
    except Exception as e:
        _log(f"not importable: {e!r}")
        return None
    try:
        import tempfile

        t0 = time.perf_counter()
        out = Path(tempfile.mkdtemp(prefix="ternforge-bf16-"))
        report = write_bf16_text_checkpoint(sub, out)
        report["phases"]["write_bf16"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(out), dtype="bfloat16",
                                                        max_model_len=args.max_model_len, enforce_eager=False))
        report["phases"]["vllm_start"] = round(time.perf_counter() - t0, 3)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(sub), local_files_only=True)
        report["engine"] = "vllm"
        return VllmEngine(llm), tokenizer, report
    except Exception as e:
        _log(f"failed to start: {e!r}")
        return None

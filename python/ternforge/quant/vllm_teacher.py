"""The teacher's chat transcripts through vLLM's offline API (`kd.chat_engine`), at serving speed.

transformers' `generate` answers the teacher's requests in left-padded batches of 16 with no paged KV cache:
about an hour for the 4B profile's 1,024 answers of up to 1,024 tokens on one GPU (PLAN.md section 5). vLLM,
the engine the submission serves with, batches them continuously. `VllmGenerator` is the same interface as
chatdata.TransformersGenerator (`greedy`, `sample`, `stops`, `batch`), so chatdata.answer and self_requests
build the transcripts identically from either: the templated prompt's token ids, then the reply up to and
including its first stop token. The bf16 teacher is read from the fetched model directory with the server's
engine options (ternforge_server.engine_vllm.ENGINE_OPTIONS), greedy for answers, seeded per request for
self-written ones, with the teacher's own stop ids (`stop_ids`, the ids transformers' generate stops on).

`kd.chat_engine`:
- "transformers" (default): generate, as always.
- "vllm": vLLM or a clear error (not importable; several ranks, where each vLLM would start its own process
  group beside torchrun's).
- "auto": vLLM where it imports and one process runs, else generate; the reason is logged and kept in the
  report (`kd.data.chat_engine`).

The transcripts of the two engines are not bit-equal (other kernels, other batch shapes): greedy answers agree
token for token up to a near-tie of the two top logits (bench/vllm_transcripts.py measures where they part).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..events import log
from .dist import World

# KV cache space for vLLM's CPU build (GiB, its VLLM_CPU_KVCACHE_SPACE) when the profile's device is the CPU.
CPU_KV_CACHE_GIB = 4


class ChatEngineUnavailable(RuntimeError):
    """kd.chat_engine "vllm" was asked for and cannot run here."""


def stop_ids(model_dir: str | Path) -> set[int]:
    """The end-of-turn ids the teacher's generate stops on, read from the model directory: its config's
    generation defaults, as transformers derives them for a model built from the config (quant/model.py)."""
    from transformers import GenerationConfig

    from ternforge_server.loader import read_config

    config, _ = read_config(Path(model_dir))
    eos = GenerationConfig.from_model_config(config).eos_token_id
    if eos is None:
        raise ValueError(f"{model_dir}: the config names no eos_token_id to end the teacher's answers")
    return set(eos if isinstance(eos, list) else [eos])


PROMPT_ROOM = 1024  # tokens for a templated request (a snippet request is about 120, a self-written one under 100)


def context_for(model_dir: str | Path, kd: Any) -> int:
    """vLLM's max_model_len for the transcripts: room for a request and kd.chat_max_new tokens of answer, at
    most what the model's config allows."""
    from ternforge_server.engine_vllm import effective_max_model_len

    return effective_max_model_len(Path(model_dir), PROMPT_ROOM + kd.chat_max_new)[0]


def choose(engine: str, world: World) -> tuple[str, str]:
    """(the engine that writes the transcripts, why) for kd.chat_engine `engine`."""
    if engine == "transformers":
        return "transformers", "kd.chat_engine is transformers"
    reason = None
    if world.size > 1:
        reason = f"{world.size} ranks: each vLLM would start its own process group beside torchrun's"
    else:
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            reason = f"vLLM does not import in the workers' environment ({e})"
    if reason is None:
        return "vllm", f"kd.chat_engine is {engine} and vLLM imports"
    if engine == "vllm":
        raise ChatEngineUnavailable(f"kd.chat_engine is vllm, but {reason}")
    log(f"chat transcripts: transformers' generate, not vLLM: {reason}")
    return "transformers", reason


def engine_environment(base: dict[str, str], device: str) -> dict[str, str]:
    """The variables vLLM's engine (and the engine-core process it starts) reads here: usage reports off, as the
    server has them (engine_vllm.TELEMETRY_OFF; the build box is online, and nothing here phones home), and on
    the CPU its KV cache size unless one is set."""
    from ternforge_server.engine_vllm import TELEMETRY_OFF

    env = {**TELEMETRY_OFF}
    if device == "cpu" and "VLLM_CPU_KVCACHE_SPACE" not in base:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KV_CACHE_GIB)
    return env


class VllmGenerator:
    """The teacher in vLLM (offline `LLM`), for chatdata.answer and self_requests."""

    name = "vllm"
    batch = 1 << 20  # every request at once: vLLM schedules its own batches

    def __init__(self, model_dir: str | Path, stops: set[int], max_model_len: int, dtype: str = "bfloat16",
                 device: str = "cuda", gpu_memory_utilization: float = 0.85, seed: int = 0):
        import os

        from vllm import LLM

        from ternforge_server.engine_vllm import ENGINE_OPTIONS

        os.environ.update(engine_environment(dict(os.environ), device))
        self.stops = stops
        options: dict[str, Any] = {**ENGINE_OPTIONS, "dtype": dtype, "max_model_len": max_model_len, "seed": seed}
        if device != "cpu":
            options["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm = LLM(model=str(model_dir), **options)

    def greedy(self, prompts: list[list[int]], max_new: int) -> list[list[int]]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new, stop_token_ids=sorted(self.stops), detokenize=False)
        return self._generate(prompts, [params] * len(prompts))

    def sample(self, prompts: list[list[int]], max_new: int, temperature: float, top_p: float, seed: int) -> list[list[int]]:
        """Request i sampled with its own seed, seed + i (vLLM's per-request generators)."""
        from vllm import SamplingParams

        params = [SamplingParams(temperature=temperature, top_p=top_p, top_k=0, max_tokens=max_new,
                                 stop_token_ids=sorted(self.stops), seed=seed + i, detokenize=False)
                  for i in range(len(prompts))]
        return self._generate(prompts, params)

    def _generate(self, prompts: list[list[int]], params: list) -> list[list[int]]:
        from vllm.inputs import TokensPrompt

        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        replies = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            # A stop token ends the reply in the transcript, as generate's output holds it: add it where vLLM
            # reports a stop on it but did not keep it.
            if c.finish_reason == "stop" and (not ids or ids[-1] not in self.stops) and c.stop_reason in self.stops:
                ids.append(int(c.stop_reason))
            replies.append(ids)
        return replies

    def close(self) -> None:
        """End vLLM's engine process and free its memory before the teacher is loaded for distillation."""
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        del self.llm

"""`python -m ternforge preflight`: what this machine has and how fast it runs the profile, before a run commits.

Measures and reports facts; it decides nothing (lib/preflight/decide.ts turns the facts into the go/no-go
table and the projected times, with the thresholds in one place). The facts:
- `torch`: version, CUDA build, whether a CUDA device is visible, each device's name, memory and capability,
  and the driver version (`nvidia-smi`, where it exists);
- `kernels`: what transformers selects for the Gated DeltaNet layers (kernels.py) and, on CUDA with the fast
  path, one forward and backward of fla's chunked delta rule at the model's real width, timed;
- `chat_engine`: the engine that would write the teacher's chat transcripts (kd.chat_engine: vLLM or
  transformers' generate) and why, or why the "vllm" asked for cannot run;
- `hub`: for every pinned source, whether it can be read (listing, gated, token, a HEAD of one file), with
  nothing downloaded (sources/hub_lock.check_access);
- `model`: the full model's shape from its config.json (built on the meta device: no memory): layers by kind,
  the ternary-eligible linear parameters per layer kind, the embedding;
- `mini`: timed runs of the profile's own phases at the real width with random weights and fewer layers, at
  two depths (one and two periods of the layer pattern) so that the per-layer cost and the fixed cost (the
  embedding and the 248 k-token head) can be told apart and extrapolated to the full depth by a line:
  the float forward, the teacher's greedy generation at the answer batch, a distillation step at the
  profile's micro-batch with its checkpointing, chunked head and latent dtype (time, steady and peak memory),
  and GPTQ of one layer of each kind over the profile's calibration tokens (capped by `gptq_tokens`).
  A mini-run that fails (out of memory at the profile's micro-batch, a kernel that does not build) is recorded in
  `mini.failures` with its phase, depth and message, and is not tried again at the second depth; every other
  fact is still reported. After each mini-run the facts so far go out as a `partial` event, so a run killed at
  a time limit (bench/gpu-check.sh) still leaves the device, the kernels and the depths that finished.
Memory is CUDA's allocator statistics on a GPU and the resident set (VmRSS, VmHWM reset through
/proc/self/clear_refs) on the CPU.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from . import kernels
from .events import emit, log
from .quant.config import QuantizeConfig, parse
from .quant.memprobe import absmean_student, eligible, rss_kib
from .quant.model import DTYPES

GEN_PROMPT = 64
LAYER_KINDS = ("linear_attention", "full_attention")


# ------------------------------------------------------------------ torch and the GPU
def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        res = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = res.stdout.strip().splitlines()[0].strip() if res.returncode == 0 and res.stdout.strip() else ""
    return line or None


def torch_facts() -> dict[str, Any]:
    available = torch.cuda.is_available()
    devices = []
    if available:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append({"name": p.name, "total_bytes": int(p.total_memory), "capability": f"{p.major}.{p.minor}"})
    return {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": available,
            "devices": devices, "driver": driver_version() if available else None}


def toolchain_facts() -> dict[str, Any]:
    """Triton builds a C launcher for every kernel it loads (fla's among them): the server's check of a C compiler
    and Python.h, with the compiler Triton would pick."""
    import os

    from ternforge_server.toolchain import ToolchainMissing, check_toolchain

    try:
        return {"ok": True, **check_toolchain(dict(os.environ)), "error": None}
    except ToolchainMissing as e:
        return {"ok": False, "cc": None, "python_include": None, "seconds": None, "error": str(e)}


def chat_engine_facts(q: QuantizeConfig) -> dict[str, Any]:
    """Which engine would write the teacher's chat transcripts (quant/vllm_teacher.choose, at the launch's
    ranks), or why kd.chat_engine "vllm" cannot run here: found now rather than after the calibration pass."""
    from .quant.dist import World
    from .quant.vllm_teacher import ChatEngineUnavailable, choose

    asked = q.kd.chat_engine
    try:
        engine, reason = choose(asked, World(rank=0, size=q.launch.world_size))
        error = None
    except ChatEngineUnavailable as e:
        engine, reason, error = None, None, str(e)
    return {"asked": asked, "engine": engine, "reason": reason, "error": error, "vllm": kernels.version_of("vllm")}


# ------------------------------------------------------------------ the model's shape
def _mini_config(text: Any, layers: int) -> Any:
    c = copy.deepcopy(text)
    c.num_hidden_layers = layers
    types = list(getattr(text, "layer_types", None) or [])
    if types:  # the pattern repeated (a mini model may be deeper than a tiny one)
        c.layer_types = [types[i % len(types)] for i in range(layers)]
    c.use_cache = True
    return c


def period(text: Any) -> int:
    """Layers in one repetition of the layer pattern (Qwen3.5: 3 Gated DeltaNet + 1 full attention)."""
    types = list(getattr(text, "layer_types", None) or [])
    if not types:
        return 1
    for p in range(1, len(types) + 1):
        if all(types[i] == types[i % p] for i in range(len(types))):
            return p
    return len(types)


def model_facts(text: Any, family: str, group: int) -> dict[str, Any]:
    from ternforge_server.loader import build_empty_model

    from .quant.model import decoder_layers

    model = build_empty_model(text, family)
    layers_name, layers = decoder_layers(model)
    types = list(getattr(text, "layer_types", None) or ["full_attention"] * len(layers))
    per_kind: dict[str, int] = {}
    for i, layer in enumerate(layers):
        n = sum(m.weight.numel() for name, m in layer.named_modules()
                if eligible(f"{layers_name}.{i}.{name}", m, layers_name, group))
        per_kind.setdefault(types[i], n)
    emb = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())
    return {"layers": {k: types.count(k) for k in sorted(set(types))}, "layer_count": len(layers),
            "eligible_per_layer": per_kind, "embedding_params": emb, "total_params": total,
            "hidden": int(text.hidden_size), "vocab": int(text.vocab_size), "period": period(text)}


# ------------------------------------------------------------------ memory and time
class Meter:
    """Steady and peak memory of this process on `device` (CUDA allocator, else the resident set)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def now(self) -> int:
        gc.collect()
        if self.cuda:
            return int(torch.cuda.memory_allocated())
        return rss_kib("VmRSS") * 1024

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            Path("/proc/self/clear_refs").write_text("5")

    def peak(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        return rss_kib("VmHWM") * 1024


def failure(phase: str, layers: int | None, e: BaseException) -> dict[str, Any]:
    """One failed mini-run as the facts record it (schemas/workers/preflight-result.schema.json MiniFailure):
    out of memory (CUDA's allocator, the CPU allocator, Python's MemoryError) or any other error."""
    text = str(e).strip()
    oom = isinstance(e, (torch.OutOfMemoryError, MemoryError)) or any(
        m in text for m in ("out of memory", "not enough memory", "can't allocate memory"))
    first = text.splitlines()[0] if text else ""
    return {"phase": phase, "layers": layers, "kind": "out_of_memory" if oom else "error",
            "error": f"{type(e).__name__}: {first[:400]}"}


def record(failures: list[dict[str, Any]], phase: str, layers: int | None, e: BaseException) -> None:
    """Append the failure of a mini-run to `failures` and say it in the log."""
    failures.append(failure(phase, layers, e))
    log(f"preflight: {phase} at {layers} layers failed: {failures[-1]['error']}")


def _timed(meter: Meter, fn) -> float:
    meter.sync()
    t = time.perf_counter()
    fn()
    meter.sync()
    return time.perf_counter() - t


def _build(text: Any, family: str, layers: int, device: str, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    cfg = _mini_config(text, layers)
    with torch.device(device):
        model = Qwen3_5ForCausalLM(cfg) if family == "qwen3_5" else AutoModelForCausalLM.from_config(cfg)
    return model.to(dtype).eval()


def _free(meter: Meter) -> None:
    gc.collect()
    if meter.cuda:
        torch.cuda.empty_cache()


def depth_run(text: Any, family: str, layers: int, q: QuantizeConfig, device: str, what: set[str],
              failures: list[dict[str, Any]], gen_tokens: int = 16) -> dict[str, Any]:
    """One depth's measurements (see the module docstring); each figure is for `layers` decoder layers. A phase
    that raises is appended to `failures` (see failure()) and leaves its figure out; the others still run."""
    from .quant.chatdata import ANSWER_BATCH
    from .quant.distill import distill, tuned_floats

    meter = Meter(device)
    kd, cal = q.kd, q.calibration
    dtype = DTYPES[q.dtype]
    vocab = int(text.vocab_size)
    out: dict[str, Any] = {"layers": layers}
    g = torch.Generator().manual_seed(1)

    def attempt(phase: str, fn) -> None:
        try:
            result = fn()
        except Exception as e:  # recorded, not raised: the preflight's point is to say what would fail
            record(failures, phase, layers, e)
            result = None
        _free(meter)
        if result is not None:
            out[phase] = result

    try:
        teacher = _build(text, family, layers, device, dtype)
    except Exception as e:  # the second depth is then not tried (main)
        record(failures, "build", layers, e)
        _free(meter)
        return out

    def forward() -> dict[str, Any]:
        ids = torch.randint(0, vocab, (cal.batch_size, cal.seq_len), generator=g).to(device)
        with torch.no_grad():
            teacher.config.use_cache = False
            teacher(input_ids=ids[:, :8])  # warm-up: kernels compile and load here
            return {"tokens": ids.numel(), "seconds": _timed(meter, lambda: teacher(input_ids=ids))}

    def generate() -> dict[str, Any]:
        prompt = torch.randint(0, vocab, (ANSWER_BATCH, GEN_PROMPT), generator=g).to(device)
        teacher.config.use_cache = True

        def gen(n: int) -> None:
            with torch.no_grad():
                teacher.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=0)
        gen(2)
        # decode steps alone: a run of n+1 new tokens less a run of 1 (the prefill and the first token)
        t_long, t_one = _timed(meter, lambda: gen(gen_tokens + 1)), _timed(meter, lambda: gen(1))
        return {"batch": ANSWER_BATCH, "steps": gen_tokens, "seconds_per_step": max(t_long - t_one, 1e-9) / gen_tokens}

    def distill_step() -> dict[str, Any]:
        # Frozen only now: on the CPU, torch 2.13's bf16 linears with frozen weights run generate about 30x slower
        # and 15 GB larger at the 4B width (measured: 92 s against 3.4 s for 2 tokens at 4 layers); a GPU is indifferent.
        for p in teacher.parameters():
            p.requires_grad_(False)
        teacher.config.use_cache = False
        student_model = _build(text, family, layers, device, dtype)
        student_model.load_state_dict(teacher.state_dict())
        student_model.config.use_cache = False
        student = absmean_student(student_model, q.group_size, kd.latent_dtype)
        micro = kd.micro_batch or kd.batch_size
        seqs = torch.randint(0, vocab, (micro, kd.seq_len), generator=g).to(device)
        # one micro-batch per step at the profile's settings; two steps, the second timed
        step_cfg = dataclasses.replace(kd, steps=2, batch_size=micro, micro_batch=micro, checkpoint_every=1000, warmup=0,
                                       onpolicy_steps=0)
        marks: dict[str, float] = {}

        def after(rec: dict) -> None:
            if rec["step"] == 1:  # the steady state: both models, U, scales, gradients and Adam moments
                marks["steady"] = meter.now()
                meter.reset_peak()
                meter.sync()
                marks["t"] = time.perf_counter()

        distill(teacher, student_model, student, seqs, step_cfg, on_step=after, tuned=tuned_floats(student_model, step_cfg))
        meter.sync()
        return {"tokens": micro * kd.seq_len, "seconds": time.perf_counter() - marks["t"],
                "steady_bytes": int(marks["steady"]), "peak_bytes": meter.peak(),
                "latent_params": sum(t.U.numel() for t in student.values())}

    for phase, fn in (("forward", forward), ("generate", generate), ("distill", distill_step)):
        if phase in what:
            attempt(phase, fn)
    del teacher
    _free(meter)
    return out


def gptq_run(text: Any, family: str, q: QuantizeConfig, device: str, max_tokens: int) -> dict[str, Any]:
    """GPTQ of one layer of each kind: inputs captured over the profile's calibration tokens (at most
    `max_tokens`), `fasterquant` on every eligible linear with the profile's settings. Seconds per layer kind."""
    from .quant.gptq import GPTQ, gptq_config
    from .quant.model import decoder_layers

    meter = Meter(device)
    seq = q.calibration.seq_len
    tokens = min(q.calibration.sequences * seq, max_tokens)
    batch = max(1, q.calibration.batch_size)
    layers_n = period(text)
    model = _build(text, family, layers_n, device, DTYPES[q.dtype])
    layers_name, layers = decoder_layers(model)
    types = list(getattr(text, "layer_types", None) or ["full_attention"])
    group = q.group_size
    cfg = gptq_config(q.gptq, group)
    first = {}
    for i in range(layers_n):
        first.setdefault(types[i % len(types)], i)
    out: dict[str, Any] = {"tokens": tokens, "kinds": {}}
    g = torch.Generator().manual_seed(2)
    for kind, i in first.items():
        linears = {n: m for n, m in layers[i].named_modules() if eligible(f"{layers_name}.{i}.{n}", m, layers_name, group)}
        gptqs = {n: GPTQ(m.weight) for n, m in linears.items()}
        hooks = [m.register_forward_hook(lambda mod, inp, _o, n=n: gptqs[n].add_batch(inp[0].detach())) for n, m in linears.items()]

        def capture() -> None:
            with torch.no_grad():
                done = 0
                while done < tokens:
                    rows = max(1, min(batch, (tokens - done) // seq))
                    model(input_ids=torch.randint(0, int(text.vocab_size), (rows, seq), generator=g).to(device))
                    done += rows * seq
        t_capture = _timed(meter, capture)
        for h in hooks:
            h.remove()
        t_quant = _timed(meter, lambda: [gptqs[n].fasterquant(m.weight, cfg) for n, m in linears.items()])
        out["kinds"][kind] = {"matrices": len(linears), "capture_seconds": t_capture / layers_n, "quant_seconds": t_quant}
        del gptqs
    del model
    _free(meter)
    return out


def kernel_run(text: Any, device: str, seq: int) -> dict[str, Any] | None:
    """One forward and backward of fla's chunked delta rule at the model's width and `seq` tokens (CUDA only)."""
    if not device.startswith("cuda") or not getattr(text, "linear_num_value_heads", None):
        return None
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    h, k, v = text.linear_num_value_heads, text.linear_key_head_dim, text.linear_value_head_dim
    dt = torch.bfloat16
    q = torch.randn(1, seq, h, k, device=device, dtype=dt, requires_grad=True)
    kk = torch.randn(1, seq, h, k, device=device, dtype=dt, requires_grad=True)
    vv = torch.randn(1, seq, h, v, device=device, dtype=dt, requires_grad=True)
    gate = (-torch.rand(1, seq, h, device=device)).requires_grad_(True)
    beta = torch.rand(1, seq, h, device=device, dtype=dt).requires_grad_(True)

    def step() -> None:
        o, _ = m.torch_chunk_gated_delta_rule(q, kk, vv, g=gate, beta=beta, initial_state=None, output_final_state=False,
                                              use_qk_l2norm_in_kernel=True)
        o.float().sum().backward()
    meter = Meter(device)
    step()  # Triton compiles here
    return {"tokens": seq, "heads": h, "seconds": _timed(meter, step)}


# ------------------------------------------------------------------ the command
def resolved(q: QuantizeConfig) -> dict[str, Any]:
    """The parsed section's figures the projection multiplies (schemas/workers/preflight-result.schema.json
    ResolvedQuantize): the worker's defaults, so that decide.ts states none of its own."""
    k = q.kd
    return {"method": q.method, "group_size": q.group_size, "device": q.device, "allow_slow_kernels": q.allow_slow_kernels,
            "calibration": {"seq_len": q.calibration.seq_len, "sequences": q.calibration.sequences,
                            "batch_size": q.calibration.batch_size},
            "allocation": {"sensitivity": q.allocation.sensitivity},
            "kd": {"steps": k.steps, "batch_size": k.batch_size, "micro_batch": k.micro_batch or k.batch_size,
                   "seq_len": k.seq_len, "latent_dtype": k.latent_dtype, "chat_prompts": k.chat_prompts,
                   "chat_self_prompts": k.chat_self_prompts, "chat_max_new": k.chat_max_new,
                   "block_steps": k.block_steps, "block_batch": k.block_batch}}


def _config_dir(config: dict[str, Any]) -> Path:
    """The directory holding the model's config.json: the fetched or local one, else config.json alone from the
    hub at the locked commit (a few kB; the weights are not fetched)."""
    if config.get("model_config_dir"):
        return Path(config["model_config_dir"])
    hub = config.get("model_hub")
    if not hub:
        raise ValueError("preflight: neither model_config_dir nor model_hub given")
    import tempfile

    from huggingface_hub import hf_hub_download

    from .sources.hub_lock import endpoint

    out = Path(tempfile.mkdtemp(prefix="ternforge-preflight-"))
    try:
        hf_hub_download(repo_id=hub["repo"], filename="config.json", revision=hub["revision"], endpoint=endpoint(), local_dir=str(out))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def main(config: dict[str, Any]) -> dict[str, Any]:
    from ternforge_server.loader import read_config

    from .sources.hub_lock import PinRequest, check_access, endpoint

    # the quantize worker's own parse: the same defaults and checks as the run the preflight projects
    q, _ = parse({**(config.get("quantize") or {}), "model_dir": "", "out_dir": ""})
    device = q.device
    facts: dict[str, Any] = {"quantize": resolved(q), "torch": torch_facts()}
    kern = kernels.probe()
    facts["kernels"] = {**kern, "run": None, "run_error": None}
    facts["toolchain"] = toolchain_facts()
    facts["chat_engine"] = chat_engine_facts(q)

    hub = []
    if config.get("hub"):
        from huggingface_hub import HfApi

        api = HfApi(endpoint=endpoint())
        for r in config["hub"]:
            req = PinRequest.from_json(r["request"])
            hub.append(check_access(req, api, r.get("commit")))
            log(f"preflight: hub {req.name}: {'ok' if hub[-1]['ok'] else hub[-1]['error']}")
    facts["hub"] = hub

    facts["mini"] = None
    try:
        where = _config_dir(config)
        try:
            text, family = read_config(where)
        finally:
            if not config.get("model_config_dir"):
                shutil.rmtree(where, ignore_errors=True)
    except Exception as e:  # the hub row says why the source cannot be read; this says what it stops
        facts["model"], facts["model_error"] = None, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        log(f"preflight: the model's config.json cannot be read ({facts['model_error']}): no shape, no mini-runs")
        return {"facts": facts}
    facts["model"], facts["model_error"] = model_facts(text, family, q.group_size), None
    usable = device == "cpu" or facts["torch"]["cuda_available"]
    if not usable:
        log(f"preflight: no CUDA device for {device}: the kernels and mini-runs are skipped")
        return {"facts": facts}
    emit("partial", facts=facts)  # the device, the toolchain and the shape, before the first kernel builds
    if kern["fast_path"]:
        try:
            facts["kernels"]["run"] = kernel_run(text, device, q.kd.seq_len)
        except Exception as e:  # the point of the check: a kernel that fails here would fail hours in
            facts["kernels"]["run_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    phases = set(config.get("phases") or [])
    if not phases:
        return {"facts": facts}
    per = facts["model"]["period"]
    failures: list[dict[str, Any]] = []
    mini: dict[str, Any] = {"depths": [], "gptq": None, "failures": failures}
    facts["mini"] = mini
    emit("partial", facts=facts)
    for layers in (per, 2 * per):
        # a phase that failed at the first depth would fail again, deeper: not tried twice
        todo = (phases - {"gptq"}) - {f["phase"] for f in failures}
        if any(f["phase"] == "build" for f in failures) or not todo:
            break
        log(f"preflight: mini-runs at {layers} layers ({', '.join(sorted(todo))})")
        mini["depths"].append(depth_run(text, family, layers, q, device, todo, failures, int(config.get("gen_tokens", 16))))
        # each measurement as it lands, so a run cut off later still shows what it measured (bench/gpu-check.sh)
        log(f"preflight: at {layers} layers: {json.dumps(mini['depths'][-1])}")
        emit("partial", facts=facts)
    if "gptq" in phases:
        log("preflight: GPTQ of one layer of each kind")
        try:
            mini["gptq"] = gptq_run(text, family, q, device, int(config.get("gptq_tokens", 1 << 20)))
            log(f"preflight: GPTQ: {json.dumps(mini['gptq'])}")
        except Exception as e:
            record(failures, "gptq", per, e)
        _free(Meter(device))
    return {"facts": facts}

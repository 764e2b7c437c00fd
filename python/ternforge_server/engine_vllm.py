"""vLLM as the production upstream on a GPU (not run here: no vLLM, no GPU on the build machine).

`start_vllm` (called by serving.build_serving for --engine vllm / auto on a GPU):
  1. `import vllm` in a subprocess: absent or broken -> VllmUnavailable (the caller logs it and falls back to
     the built-in engine);
  2. `python -m ternforge_server export-bf16`, a short-lived process (its CUDA context dies with it), writes the
     text model as a bf16 checkpoint: every non-exempt manifest tensor, W = (code - 1) * scale for packed ones,
     from shards whose sha256 matches the manifest, written tensor by tensor into one safetensors file (never
     the whole model in memory), under the source checkpoint's tensor names, with the source config.json
     (vLLM 0.19.1 registers Qwen3_5ForConditionalGeneration only; when the tied head is dropped the text
     config's own `tie_word_embeddings` is written true, since vLLM reads the flag there, default False) and
     the tokenizer files; in /dev/shm when it has room, else in the submission's tmp/, else (a read-only
     submission) the system's temporary directory;
  3. before that, the C toolchain Triton builds its kernel launchers with is checked (toolchain.py): a
     compiler and the interpreter's headers, else VllmUnavailable at once instead of a failure minutes in;
  4. vLLM's OpenAI server on it: loopback port, `--language-model-only` (no vision tower), no speculative
     config (no MTP: its weights are exempt and not written), `--served-model-name`, `--max-model-len` (the
     smaller of the flag and the model's max_position_embeddings, see effective_max_model_len),
     `--gpu-memory-utilization`, `--generation-config vllm` (our requests name every sampling field),
     `--gdn-prefill-backend triton` (on SM 9.0 vLLM 0.19.1 otherwise picks FlashInfer's Gated DeltaNet
     prefill, JIT-compiled with nvcc from 34 .cu files on first use: no toolkit on the grading box, minutes
     with one); its caches (vLLM, Triton, inductor, CUDA) and telemetry opt-out in one writable directory
     (vllm_env);
  5. once vLLM's /health answers, the temporary checkpoint is deleted.
vLLM must be ready within its share of the start-up budget (budget - install - elapsed - the built-in
engine's reserve, at least 60 s); otherwise it is stopped and VllmUnavailable says why. Any OSError on this path is a fallback too. The
controller talks to vLLM like to the built-in upstream (token ids in and out), so vLLM's reasoning parser is
never involved and `content` is never null.
vLLM serves on a GPU only, unless `--vllm-on-cpu` (TERNFORGE_VLLM_ON_CPU=1) opts in: vLLM's CPU build runs
Llama-architecture models, which bench/vllm_cpu.py uses to run this whole path on smol.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .children import child_env, free_port, wait_healthy
from .contract import BUILTIN_RESERVE_S, MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS

MIN_VLLM_SHARE_S = 60.0
# Files of a submission that a Hugging Face checkpoint directory carries besides its weights.
_CARRY_SUFFIXES = (".json", ".jinja", ".txt", ".model", ".tiktoken")
_NOT_CARRIED = {"quantization_manifest.json", "model.safetensors.index.json"}


def _log(msg: str) -> None:
    sys.stderr.write(f"[vllm] {msg}\n")
    sys.stderr.flush()


class VllmUnavailable(Exception):
    """vLLM cannot serve here; the message says why."""


# ------------------------------------------------------------------------------------------ the bf16 checkpoint

_ST_DTYPE = {"bfloat16": "BF16", "float32": "F32", "float16": "F16"}


def _plan(sub: Path, manifest: dict) -> tuple[list[tuple[str, str, Any]], bool]:
    """[(source tensor name to write, manifest entry name, torch dtype)] and whether the head is tied."""
    import torch

    from .loader import _fp32_keep, is_exempt, model_name_for, read_config

    config, family = read_config(sub)
    if family == "qwen3_5":
        from transformers import Qwen3_5ForCausalLM as cls
    else:
        from transformers import AutoModelForCausalLM

        cls = AutoModelForCausalLM
    keep = _fp32_keep(cls)
    tie = bool(getattr(config, "tie_word_embeddings", False))
    plan = []
    for name, entry in sorted(manifest["tensors"].items()):
        if is_exempt(name, entry):
            continue
        dtype = torch.float32 if any(k in model_name_for(name) for k in keep) else torch.bfloat16
        plan.append((name, name, dtype))
        for tied in entry.get("tied_to", []) or []:
            if not (tie and tied.endswith("lm_head.weight")):
                plan.append((tied, name, dtype))
    return plan, tie


def checkpoint_bytes(sub: Path) -> int:
    """What export_bf16 writes, in bytes (weights only)."""
    from .loader import read_manifest

    manifest = read_manifest(sub)
    plan, _ = _plan(sub, manifest)
    total = 0
    for _, src, dtype in plan:
        n = 1
        for d in manifest["tensors"][src]["shape"]:
            n *= int(d)
        total += n * (4 if str(dtype) == "torch.float32" else 2)
    return total


def export_bf16(sub: Path, out: Path, device: str = "cpu") -> dict:
    """Write the text model of the audited submission `sub` as a bf16 Hugging Face checkpoint in `out`."""
    import torch
    from safetensors import safe_open

    from .loader import LoadError, _check_shape, read_manifest, verify_shards
    from .packing import dequantize, unpack_2bit

    t0 = time.perf_counter()
    sub = Path(sub).resolve()
    manifest = read_manifest(sub)
    shards = verify_shards(sub, manifest)
    t_verify = time.perf_counter() - t0
    plan, tie = _plan(sub, manifest)
    out.mkdir(parents=True, exist_ok=True)

    header: dict[str, Any] = {"__metadata__": {"format": "pt", "source": "ternforge export-bf16"}}
    offset = 0
    for dst, src, dtype in plan:
        shape = [int(x) for x in manifest["tensors"][src]["shape"]]
        n = 1
        for d in shape:
            n *= d
        size = n * (4 if dtype == torch.float32 else 2)
        header[dst] = {"dtype": _ST_DTYPE[str(dtype).replace("torch.", "")], "shape": shape,
                       "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)

    t0 = time.perf_counter()
    handles: dict[str, Any] = {}
    target = out / "model.safetensors"
    tmp = out / "model.safetensors.partial"
    try:
        with open(tmp, "wb") as f:
            f.write(len(head).to_bytes(8, "little"))
            f.write(head)
            for dst, src, dtype in plan:
                entry = manifest["tensors"][src]
                shard = entry["shard"]
                if shard not in handles:
                    handles[shard] = safe_open(str(sub / shard), framework="pt", device=device)
                h = handles[shard]
                shape = [int(x) for x in entry["shape"]]
                if entry["encoding"] == "packed_2bit":
                    g = int(entry["group_size"])
                    codes, scale = h.get_tensor(entry["codes_key"]), h.get_tensor(entry["scale_key"])
                    _check_shape(src, entry["codes_key"], codes, [shape[0], shape[1] // 4], torch.uint8)
                    _check_shape(src, entry["scale_key"], scale, [shape[0], shape[1] // g], torch.float32)
                    try:
                        w = dequantize(unpack_2bit(codes, shape[1]), scale, g, dtype)
                    except ValueError as e:
                        raise LoadError("invalid-code", f"{src}: {e}", tensor=src) from None
                else:
                    w = h.get_tensor(entry["data_key"])
                    if list(w.shape) != shape:
                        raise LoadError("tensor-shape-mismatch", f"{src}: shape {list(w.shape)}, manifest {shape}",
                                        tensor=src, expected=shape, actual=list(w.shape))
                    w = w.to(dtype)
                f.write(w.contiguous().cpu().view(torch.uint8).numpy().tobytes())
        os.replace(tmp, target)
    finally:
        handles.clear()
        tmp.unlink(missing_ok=True)
    for p in sorted(sub.iterdir()):
        if p.is_file() and p.suffix in _CARRY_SUFFIXES and p.name not in _NOT_CARRIED:
            shutil.copyfile(p, out / p.name)
    edits = write_config(sub, out / "config.json", tie)
    return {"tensors": len(plan), "bytes": offset, "tied_head": tie, "device": device, "shards": shards,
            "config_edits": edits, "phases": {"verify_sha256": round(t_verify, 3), "dequantize_write": round(time.perf_counter() - t0, 3)}}


def write_config(sub: Path, target: Path, tie: bool) -> list[str]:
    """The source config.json as `target`, with the head's tie stated where vLLM reads it: vLLM 0.19.1's
    Qwen3_5ForCausalLM takes `tie_word_embeddings` from the text config (default False), so a flag only at
    the top level builds an untied head that the export has no tensor for, and vLLM refuses to start. The
    edits made, as 'key: old -> new' (none: the file is copied byte for byte)."""
    raw = json.loads((sub / "config.json").read_text(encoding="utf-8"))
    edits = []
    text = raw.get("text_config")
    if tie and isinstance(text, dict) and text.get("tie_word_embeddings") is not True:
        edits.append(f"text_config.tie_word_embeddings: {json.dumps(text.get('tie_word_embeddings'))} -> true")
        text["tie_word_embeddings"] = True
    if tie and "text_config" not in raw and raw.get("tie_word_embeddings") is not True:
        edits.append(f"tie_word_embeddings: {json.dumps(raw.get('tie_word_embeddings'))} -> true")
        raw["tie_word_embeddings"] = True
    if edits:
        target.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    else:
        shutil.copyfile(sub / "config.json", target)
    return edits


def effective_max_model_len(sub: Path, requested: int) -> tuple[int, int | None]:
    """(the context length to serve, the model's max_position_embeddings or None): the smaller of the two,
    since vLLM refuses a --max-model-len above what the model's config allows."""
    from .loader import read_config

    config, _ = read_config(sub)
    model = getattr(config, "max_position_embeddings", None)
    if isinstance(model, int) and model > 0:
        return min(requested, model), model
    return requested, None


def export_main(argv: list[str]) -> int:
    """`python -m ternforge_server export-bf16 --dir SUB --out DIR [--device cpu|cuda]`; prints a JSON report."""
    p = argparse.ArgumentParser(prog="python -m ternforge_server export-bf16")
    p.add_argument("--dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    from .loader import LoadError

    try:
        rep = export_bf16(Path(a.dir), Path(a.out), a.device)
    except LoadError as e:
        print(json.dumps({"status": "refused", "error": e.to_json()}))
        return 2
    print(json.dumps({"status": "ok", **rep}))
    return 0


def temp_root(sub: Path, need: int, shm: Path = Path("/dev/shm")) -> Path:
    """/dev/shm when it has room for `need` bytes plus 10%, else the submission's tmp/, else (the submission
    is read-only) the system's temporary directory."""
    try:
        st = os.statvfs(shm)
        if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize > need * 1.1:
            return shm
    except OSError:
        pass
    root = sub / "tmp"
    try:
        root.mkdir(exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return root
    except OSError as e:
        import tempfile

        _log(f"the submission's tmp/ is not writable ({e.strerror or e}); the bf16 checkpoint goes to "
             f"{tempfile.gettempdir()}")
        return Path(tempfile.gettempdir())


def cache_root(sub: Path) -> Path:
    """The one writable directory for vLLM's, Triton's, inductor's and CUDA's caches: the submission's .cache/
    when it is writable, else one under the system's temporary directory. Never $HOME."""
    import tempfile

    for root in (sub / ".cache", Path(tempfile.gettempdir()) / f"ternforge-cache-{os.getuid()}"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
            return root
        except OSError:
            continue
    raise VllmUnavailable("no writable directory for vLLM's caches (the submission and the temporary "
                          "directory are read-only)")


#: The caches vLLM's start-up writes (and where a shipped compile cache would be put), under cache_root.
CACHE_ENV = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
             "CUDA_CACHE_PATH": "nv", "XDG_CACHE_HOME": "xdg"}
#: No usage reports: the grading box is offline, and a submission phones nowhere.
TELEMETRY_OFF = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_DO_NOT_TRACK": "1"}


def vllm_env(base: dict, root: Path) -> dict:
    """`base` with every cache of vLLM's start-up under `root` and telemetry off."""
    env = dict(base)
    for var, sub in CACHE_ENV.items():
        env[var] = str(root / sub)
    env.update(TELEMETRY_OFF)
    return env


# ------------------------------------------------------------------------------------------ starting vLLM


def vllm_share(budget_s: float, t_start: float) -> float:
    """Seconds vLLM may take to become ready: budget - install - elapsed - the built-in engine's reserve
    (schemas/contract.json startup.builtin_reserve_s), at least 60 s."""
    try:
        install = float(os.environ.get("TERNFORGE_INSTALL_SECONDS", "0") or 0)
    except ValueError:
        install = 0.0
    elapsed = time.monotonic() - t_start
    return max(MIN_VLLM_SHARE_S, budget_s - install - elapsed - BUILTIN_RESERVE_S)


# vLLM's engine options for this project's models, as EngineArgs fields: the server's argv (vllm_command) and
# the teacher's offline generation (ternforge.quant.vllm_teacher) both start vLLM with them.
ENGINE_OPTIONS: dict[str, Any] = {
    "language_model_only": True,  # no vision tower
    "generation_config": "vllm",  # our requests name every sampling field
    "gdn_prefill_backend": "triton",  # on SM 9.0 vLLM 0.19.1 otherwise JIT-builds FlashInfer's (module docstring)
    # No torch.compile (49 s cold on a Gated DeltaNet model) and no CUDA graph capture (17 s): with them the
    # start-up budget does not keep its 25% spare (README, "Serving stack and start-up budget"); eager decode of
    # 4096 tokens is estimated there at about 100 s, inside the 300 s per request.
    "enforce_eager": True,
}


def engine_flags(options: dict[str, Any]) -> list[str]:
    """EngineArgs fields as vLLM's command-line flags (True: the bare flag)."""
    flags: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def vllm_command(model_dir: Path, name: str, port: int, args: Any) -> list[str]:
    """vLLM's own argv. `args.max_model_len` is already the effective one (main applies
    effective_max_model_len before anything starts, so the controller and vLLM agree)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "bfloat16", "--max-model-len", str(args.max_model_len),
            "--gpu-memory-utilization", str(args.gpu_memory_utilization),
            "--max-num-seqs", str(args.max_batch or 64),
            # The most top logprobs the controller can ask for (the API's bounds, schemas/contract.json `api`).
            "--max-logprobs", str(max(MAX_COMPLETION_LOGPROBS, MAX_CHAT_TOP_LOGPROBS)),
            *engine_flags(ENGINE_OPTIONS)]


def start_vllm(sub: Path, args: Any, children: Any, device: str, name: str, budget_s: float,
               t_start: float, notes: dict) -> tuple[Any, int, dict]:
    """(process, port, report) of a healthy vLLM upstream, or VllmUnavailable. What it found on the way (the
    cache root, the toolchain, vLLM's argv) goes into `notes` as it is found, so a fallback's report has it."""
    from .toolchain import ToolchainMissing, resolve_toolchain

    t0 = time.perf_counter()
    caches = cache_root(sub)
    notes["cache_root"] = str(caches)
    env = vllm_env(child_env(), caches)
    try:
        probe = subprocess.run([sys.executable, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                               capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        raise VllmUnavailable("`import vllm` took over 180 s") from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VllmUnavailable(f"vLLM cannot import: {last}")
    version = probe.stdout.strip()
    _log(f"vLLM {version} imports ({time.perf_counter() - t0:.1f} s)")
    if device != "cuda" and not getattr(args, "vllm_on_cpu", False):
        raise VllmUnavailable("no GPU: vLLM serves on a GPU only (--vllm-on-cpu opts in to vLLM's CPU build)")
    try:
        toolchain = notes["toolchain"] = resolve_toolchain(env, sub, caches)  # env gains CC if shipped
    except ToolchainMissing as e:
        notes["toolchain"] = {"missing": str(e)}
        raise VllmUnavailable(f"Triton cannot build its kernel launchers here: {e}") from None
    _log(f"C toolchain for Triton ({toolchain['kind']}): {toolchain['cc']} ({toolchain['seconds']} s)"
         + (f"; the box's own: {toolchain['system_missing']}" if toolchain["kind"] == "shipped" else ""))
    share = vllm_share(budget_s, t_start)
    deadline = time.monotonic() + share
    _log(f"vLLM has {share:.0f} s to become ready")

    out = None
    try:
        need = checkpoint_bytes(sub)
        out = Path(__import__("tempfile").mkdtemp(prefix="ternforge-bf16-", dir=temp_root(sub, need)))
        t0 = time.perf_counter()
        # Through `children`, so a controller stopped meanwhile stops the export too.
        exp = children.spawn([sys.executable, "-m", "ternforge_server", "export-bf16", "--dir", str(sub),
                              "--out", str(out), "--device", device], env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = exp.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            children.stop(exp)
            raise VllmUnavailable(f"writing the bf16 checkpoint took over {share:.0f} s") from None
        ex = subprocess.CompletedProcess(exp.args, exp.returncode, stdout, stderr)
        if ex.returncode != 0:
            try:
                got = json.loads(ex.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                got = {}
            if got.get("status") == "refused":  # the shards fail the audit: no engine may serve them
                from .loader import LoadError

                err = got["error"]
                raise LoadError(err["reason"], err.get("message", ""),
                                **{k: v for k, v in err.items() if k not in ("reason", "message")})
            raise VllmUnavailable(f"bf16 export failed: {(ex.stderr.strip().splitlines() or ['?'])[-1]}")
        exported = json.loads(ex.stdout.strip().splitlines()[-1])
        phases = {"verify": exported["phases"]["verify_sha256"],
                  "dequantize_write_bf16": exported["phases"]["dequantize_write"],
                  "export_process": round(time.perf_counter() - t0, 3)}
        _log(f"bf16 checkpoint: {exported['bytes'] / 2**30:.2f} GiB in {out} ({phases})")
        port = free_port()
        t0 = time.perf_counter()
        argv = notes["argv"] = vllm_command(out, name, port, args)
        proc = children.spawn(argv, env)
        ok, why = wait_healthy(port, proc, max(1.0, deadline - time.monotonic()))
        if not ok:
            children.stop(proc)
            raise VllmUnavailable(f"vLLM {why}")
        phases["vllm_start"] = round(time.perf_counter() - t0, 3)
        return proc, port, {"vllm_version": version, "vllm_share_s": round(share, 1), "phases": phases,
                            "shards": exported["shards"], "config_edits": exported["config_edits"],
                            "bf16_checkpoint": {"bytes": exported["bytes"], "dir": str(out.parent)}}
    finally:
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)

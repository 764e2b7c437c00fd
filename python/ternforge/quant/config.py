"""The quantize stage's configuration, parsed once into frozen, typed sections.

`parse(config)` takes what `stages/quantize.ts` hands the worker: the profile section
(schemas/stages/quantize.schema.json; python/tests/test_quant_config.py checks that every section and key
here is the schema's, with the same types, enums and defaults the schema allows) plus the paths the stage
adds (model_dir, out_dir, source_json, calib_dir, work_dir). Every method reads its settings from the
result; nothing else reads the dict. An unknown key, a wrong type or a value outside its range is a
ConfigError naming every such key at once.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, get_args, get_origin, get_type_hints

METHOD_NAMES = ("absmean", "none", "twn", "gptq", "gptq+kd")
SEARCHES = ("exact", "grid")
SCHEDULES = ("constant", "cosine")
DTYPES = ("float32", "bfloat16", "float16")
LATENT_DTYPE_NAMES = ("float32", "bfloat16")
CHAT_ENGINES = ("transformers", "vllm", "auto")  # kd.chat_engine (vllm_teacher.py)
BACKEND_NAMES = ("gloo", "nccl")  # torch.distributed backends (dist.join)
SHARD_NAMES = ("replicate", "fsdp")  # the distillation's trained state: whole on every rank, or split by rows
DISTRIBUTED_METHODS = ("gptq", "gptq+kd")  # the methods that split their work over a launch's ranks


def schedule_factor(schedule: str, step: int, steps: int, warmup: int = 0) -> float:
    """The learning-rate multiplier for `step` (0-based) of `steps` under a schedule of SCHEDULES: 'constant' is 1;
    'cosine' rises linearly over `warmup` steps, then falls along a half cosine to 0 at `steps`."""
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        raise ValueError(f"kd.schedule must be one of {SCHEDULES}, not {schedule!r}")
    if step < warmup:
        return (step + 1) / (warmup + 1)
    span = max(1, steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / span)))


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("quantize config: " + "; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class CalibrationConfig:
    """Calibration batches drawn from fetch-calib's calibration role."""

    seq_len: int = 256
    sequences: int = 64
    batch_size: int = 8


@dataclass(frozen=True)
class AllocationConfig:
    """Float budget (floatplan.allocate): which further tensors stay float, by measured sensitivity."""

    target_fraction: float = 0.955
    min_relative_score: float = 2.0
    sensitivity: bool = True


@dataclass(frozen=True)
class GPTQSection:
    blocksize: int = 128
    percdamp: float = 0.1
    actorder: bool = True
    scale_search: str = "exact"  # twn.group_scales search of each group's scale: exact | grid
    # gptq+kd: windows of calibration.seq_len over the distillation's teacher-written chat transcripts added to
    # the calibration batches GPTQ fits on (the teacher writes them before GPTQ runs); 0: calibration text only
    chat_windows: int = 0


@dataclass(frozen=True)
class TWNSection:
    search: str = "exact"  # exact | grid


@dataclass(frozen=True)
class KDConfig:
    """Distillation (distill.py): the training loop's settings and what its windows are made of."""

    steps: int = 100
    lr: float = 5e-3  # latent codes U (dimensionless: a code flips after moving ~0.5)
    scale_lr: float = 5e-4  # scales, relative to their magnitude through Adam's normalisation
    norm_lr: float = 0.0  # every norm's gain, trained beside the codes (Norm Tweaking); 0: the source's values
    float_lr: float = 0.0  # every linear the plan keeps float (not embedding or head), trained likewise; 0: source's
    weight_decay: float = 0.0
    temperature: float = 1.0
    hidden_mse: float = 0.0  # weight of the hidden-state term; 0 disables it
    hidden_cos: float = 0.0  # weight of the hidden-state cosine term (1 - cos per position, TernaryLLM's OFF); 0: off
    batch_size: int = 4
    checkpoint_every: int = 50
    seed: int = 0  # the quantize section's seed (not a kd key)
    grad_clip: float = 1.0
    schedule: str = "constant"  # or "cosine"
    warmup: int = 0
    logit_chunk: int = 0  # > 0: the head and the KL run over this many positions at a time (chunked_kd_loss)
    stop_weight: float = 0.0  # a position's KL counts 1 + stop_weight * p_teacher(end of turn) times
    micro_batch: int = 0  # rows per forward/backward, gradients accumulated over batch_size / micro_batch; 0: batch_size
    grad_checkpointing: bool = True  # recompute each decoder layer in the backward pass (keep only its input)
    latent_dtype: str = "float32"  # or "bfloat16": U, its gradient and its Adam moments at half the bytes
    seq_len: int = 0  # window length; 0: the calibration section's
    sequences: int | None = None  # calibration-text windows; None: all there are
    chat_prompts: int = 0
    chat_self_prompts: int = 0
    chat_self_openers: tuple[str, ...] = ("",)  # first words of the self-written requests, in turn ("": free)
    chat_max_new: int = 128
    chat_engine: str = "transformers"  # who writes the teacher's transcripts (vllm_teacher.py): transformers, vllm, auto
    block_steps: int = 0  # Block-AP before distilling (blockap.py): steps per decoder layer; 0: none
    block_sequences: int = 256  # windows of the distillation data Block-AP trains on
    block_batch: int = 8  # windows per Block-AP step
    block_lr: float = 1e-2  # Block-AP's rate for U (the distillation's kd.lr 0.025 diverged there)
    block_scale_lr: float = 1.6e-4  # Block-AP's rate for the scales
    onpolicy_steps: int = 0  # the last N steps add windows of the student's own answers to the chat requests (GKD)


def kd_problems(kd: KDConfig) -> list[str]:
    """What no single key's range can say about the kd section: the settings taken together."""
    problems = []
    mb = kd.micro_batch or kd.batch_size
    if kd.batch_size <= 0 or mb <= 0 or kd.batch_size % mb != 0:
        problems.append(f"kd.micro_batch ({kd.micro_batch}) must divide kd.batch_size ({kd.batch_size})")
    if kd.onpolicy_steps > kd.steps:
        problems.append(f"kd.onpolicy_steps ({kd.onpolicy_steps}) must not exceed kd.steps ({kd.steps})")
    if not kd.chat_self_openers:
        problems.append("kd.chat_self_openers must hold at least one string (\"\" for a free request)")
    if kd.onpolicy_steps and kd.chat_prompts + kd.chat_self_prompts <= 0:
        problems.append("kd.onpolicy_steps needs chat requests for the student to answer "
                        "(kd.chat_prompts or kd.chat_self_prompts)")
    if kd.block_steps and (kd.block_batch <= 0 or kd.block_sequences < kd.block_batch):
        problems.append(f"kd.block_sequences ({kd.block_sequences}) must hold at least one batch of "
                        f"kd.block_batch ({kd.block_batch}) windows")
    return problems


def method_problems(method: str, gptq: GPTQSection, kd: KDConfig) -> list[str]:
    """Settings that only one method can honour, refused for the others."""
    problems = []
    if gptq.chat_windows and method != "gptq+kd":
        problems.append(f"gptq.chat_windows ({gptq.chat_windows}) needs the distillation's chat transcripts: "
                        f"method gptq+kd, not {method}")
    elif gptq.chat_windows and kd.chat_prompts + kd.chat_self_prompts <= 0:
        problems.append("gptq.chat_windows needs chat requests for the teacher to answer "
                        "(kd.chat_prompts or kd.chat_self_prompts)")
    return problems


@dataclass(frozen=True)
class LaunchConfig:
    """quantize.launch: the worker runs under torchrun with this many processes (stages/quantize.ts starts it;
    dist.py is what a rank does). Absent: one process, no torchrun."""

    nproc_per_node: int = 1
    nnodes: int = 1
    rdzv_endpoint: str | None = None  # host:port of the c10d rendezvous; needed when nnodes > 1
    backend: str | None = None  # gloo | nccl; None: nccl on a CUDA device, gloo on the CPU
    shard: str = "replicate"  # or "fsdp": the ternary linears' U, scales, gradients and Adam moments split over ranks

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


def launch_problems(method: str, launch: LaunchConfig, kd: KDConfig) -> list[str]:
    """What a launch of several processes cannot run: a method that does not split its work, more nodes
    without a rendezvous, a distillation batch the ranks cannot share in whole micro-batches."""
    n = launch.world_size
    problems = []
    if launch.nnodes > 1 and not launch.rdzv_endpoint:
        problems.append(f"launch.nnodes ({launch.nnodes}) > 1 needs launch.rdzv_endpoint (host:port of the rendezvous)")
    if n > 1 and method not in DISTRIBUTED_METHODS:
        problems.append(f"launch of {n} processes: method {method} runs in one process "
                        f"(only {' and '.join(DISTRIBUTED_METHODS)} split their work over ranks)")
    if launch.shard == "fsdp" and (n == 1 or method != "gptq+kd"):
        problems.append(f"launch.shard fsdp shards the distillation's state over ranks: method gptq+kd with several "
                        f"processes, not {method} with {n}")
    if launch.shard == "fsdp" and kd.onpolicy_steps:
        problems.append("launch.shard fsdp does not run kd.onpolicy_steps (the student writes its answers whole)")
    if n > 1 and method == "gptq+kd":
        mb = rank_micro_batch(kd, n)
        if mb <= 0 or kd.batch_size % (mb * n) != 0:
            problems.append(f"kd.batch_size ({kd.batch_size}) must split into whole micro-batches of "
                            f"{kd.micro_batch or 'batch_size / ranks'} rows, the same number for each of the {n} ranks")
    return problems


def rank_micro_batch(kd: KDConfig, world_size: int) -> int:
    """Rows per forward/backward on each rank: kd.micro_batch, or with none the rank's share of the batch."""
    return kd.micro_batch or kd.batch_size // world_size


NOT_PROFILE_KEYS = {KDConfig: ("seed",)}  # fields filled from elsewhere, not keys of the profile section


@dataclass(frozen=True)
class QuantizeConfig:
    method: str
    group_size: int
    keep_float: tuple[str, ...] = ()
    max_file_bytes: int = 2 << 30
    seed: int = 0
    device: str = "cpu"
    allow_slow_kernels: bool = False
    dtype: str = "float32"
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    gptq: GPTQSection = field(default_factory=GPTQSection)
    twn: TWNSection = field(default_factory=TWNSection)
    kd: KDConfig = field(default_factory=KDConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)


@dataclass(frozen=True)
class Paths:
    """What the stage adds to the profile section."""

    model_dir: str
    out_dir: str
    source_json: str | None = None
    calib_dir: str | None = None
    work_dir: str | None = None
    base_model: str | None = None
    revision: str | None = None


SECTIONS = {"calibration": CalibrationConfig, "allocation": AllocationConfig, "gptq": GPTQSection,
            "twn": TWNSection, "kd": KDConfig, "launch": LaunchConfig}
ENUMS = {("", "method"): METHOD_NAMES, ("", "dtype"): DTYPES, ("gptq", "scale_search"): SEARCHES,
         ("twn", "search"): SEARCHES, ("kd", "schedule"): SCHEDULES, ("kd", "latent_dtype"): LATENT_DTYPE_NAMES,
         ("launch", "backend"): BACKEND_NAMES, ("launch", "shard"): SHARD_NAMES, ("kd", "chat_engine"): CHAT_ENGINES}
MINIMUM = {("", "group_size"): 4, ("", "max_file_bytes"): 1024, ("", "seed"): 0, ("kd", "checkpoint_every"): 1,
           ("kd", "batch_size"): 1,
           ("kd", "chat_max_new"): 1, ("kd", "stop_weight"): 0, ("kd", "hidden_cos"): 0, ("kd", "block_sequences"): 1,
           ("kd", "block_batch"): 1, ("launch", "nproc_per_node"): 1, ("launch", "nnodes"): 1}


def _check(section: str, key: str, value: Any, hint: Any, problems: list[str]) -> Any:
    where = f"{section}.{key}" if section else key
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple:  # tuple[str, ...]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            problems.append(f"{where} must be a list of strings, not {value!r}")
            return None
        return tuple(value)
    allowed = tuple(a for a in args if a is not type(None)) if args else (hint,)
    if value is None and type(None) in args:
        return None
    ok = False
    for t in allowed:
        if t is bool:
            ok = ok or isinstance(value, bool)
        elif t is int:
            ok = ok or (isinstance(value, int) and not isinstance(value, bool))
        elif t is float:
            ok = ok or (isinstance(value, (int, float)) and not isinstance(value, bool))
        elif t is str:
            ok = ok or isinstance(value, str)
    if not ok:
        problems.append(f"{where} must be {' or '.join(t.__name__ for t in allowed)}, not {value!r}")
        return None
    if float in allowed and isinstance(value, int):
        value = float(value)
    if (section, key) in ENUMS and value not in ENUMS[(section, key)]:
        problems.append(f"{where} must be one of {list(ENUMS[(section, key)])}, not {value!r}")
    if (section, key) in MINIMUM and value < MINIMUM[(section, key)]:
        problems.append(f"{where} must be at least {MINIMUM[(section, key)]}, not {value!r}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        problems.append(f"{where} must not be negative, not {value!r}")
    return value


def _section(name: str, cls: type, given: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(given, dict):
        problems.append(f"{name} must be an object, not {given!r}")
        return {}
    hints = get_type_hints(cls)
    keys = {f.name for f in fields(cls)} - set(NOT_PROFILE_KEYS.get(cls, ()))
    out: dict[str, Any] = {}
    for k, v in given.items():
        if k not in keys:
            problems.append(f"unknown key {name}.{k}")
            continue
        out[k] = _check(name, k, v, hints[k], problems)
    return out


PATH_KEYS = tuple(f.name for f in fields(Paths))


def parse(config: dict[str, Any]) -> tuple[QuantizeConfig, Paths]:
    """The profile section plus the stage's paths -> (QuantizeConfig, Paths); ConfigError lists every problem."""
    problems: list[str] = []
    hints = get_type_hints(QuantizeConfig)
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for k, v in config.items():
        if k in PATH_KEYS:
            continue
        if k in SECTIONS:
            sections[k] = _section(k, SECTIONS[k], v, problems)
        elif k in hints:
            top[k] = _check("", k, v, hints[k], problems)
        else:
            problems.append(f"unknown key {k}")
    for k in ("method", "group_size"):
        if k not in config:
            problems.append(f"missing key {k}")
    if isinstance(top.get("group_size"), int) and top["group_size"] % 4 != 0:
        problems.append(f"group_size must be a multiple of 4, not {top['group_size']}")
    for k in ("model_dir", "out_dir"):
        if not isinstance(config.get(k), str):
            problems.append(f"missing path {k}")
    if problems:
        raise ConfigError(problems)
    built = {k: SECTIONS[k](**v) for k, v in sections.items()}
    cal = built.get("calibration", CalibrationConfig())
    kd = built.get("kd", KDConfig())
    kd = dataclasses.replace(kd, seed=top.get("seed", 0), seq_len=kd.seq_len or cal.seq_len)
    together = (kd_problems(kd) + method_problems(top.get("method", ""), built.get("gptq", GPTQSection()), kd)
                + launch_problems(top.get("method", ""), built.get("launch", LaunchConfig()), kd))
    if together:
        raise ConfigError(together)
    cfg = QuantizeConfig(**top, **{**built, "kd": kd})
    paths = Paths(**{k: (None if config.get(k) is None else str(config[k])) for k in PATH_KEYS if k in config})
    return cfg, paths

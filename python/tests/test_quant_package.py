"""The quantize package as one piece: its typed config is the schema's, every method runs through the same
protocol and writer with the same evidence figures, and no module imports another that imports it back."""
from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from ternforge.quant import config as qc
from ternforge.quant import run
from ternforge.quant.config import ConfigError, parse
from ternforge.quant.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "stages" / "quantize.schema.json").read_text())
JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _schema_type(hint) -> str | tuple:
    if typing.get_origin(hint) is tuple:
        return ("array", "string")
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return JSON_TYPES[args[0] if args else hint]


def _check_section(cls, props: dict, section: str) -> None:
    hints = typing.get_type_hints(cls)
    keys = {f.name for f in dataclasses.fields(cls)} - set(qc.NOT_PROFILE_KEYS.get(cls, ())) - set(qc.SECTIONS)
    assert keys == set(props) - set(qc.SECTIONS), f"{section or 'top level'}: fields and schema keys differ"
    for f in dataclasses.fields(cls):
        if f.name not in keys:
            continue
        prop = props[f.name]
        enum = qc.ENUMS.get((section, f.name))
        if "enum" in prop:
            assert enum is not None and list(enum) == prop["enum"], f"{section}.{f.name}: enum"
        else:
            want = _schema_type(hints[f.name])
            got = (prop["type"], prop["items"]["type"]) if prop["type"] == "array" else prop["type"]
            assert got == want, f"{section}.{f.name}: schema {got}, config {want}"
        if "minimum" in prop:
            assert qc.MINIMUM.get((section, f.name), 0) == prop["minimum"], f"{section}.{f.name}: minimum"
        default = f.default if f.default is not dataclasses.MISSING else None
        if default is not None and f.name not in ("seq_len",):
            if enum is not None:
                assert default in enum
            if "minimum" in prop and not isinstance(default, tuple):
                assert default >= prop["minimum"], f"{section}.{f.name}: default under the schema's minimum"


def test_typed_config_is_the_schema() -> None:
    """Every schema key is a typed field and every field (but those filled from elsewhere) a schema key,
    with the same type, enum, minimum; defaults allowed by the schema."""
    props = SCHEMA["properties"]
    assert set(SCHEMA["required"]) == {"method", "group_size"}
    _check_section(qc.QuantizeConfig, props, "")
    for name, cls in qc.SECTIONS.items():
        assert props[name]["additionalProperties"] is False
        _check_section(cls, props[name]["properties"], name)
    assert dataclasses.is_dataclass(qc.QuantizeConfig) and qc.QuantizeConfig.__dataclass_params__.frozen


@pytest.mark.parametrize("profile", ["tiny", "smol", "qwen3.5-4b"])
def test_every_shipped_profile_parses(profile: str) -> None:
    section = json.loads((ROOT / "profiles" / f"{profile}.json").read_text())["stages"]["quantize"]
    cfg, paths = qc.parse({**section, "model_dir": "m", "out_dir": "o"})
    assert cfg.method == section["method"] and paths.model_dir == "m"
    assert cfg.kd.seq_len == section.get("kd", {}).get("seq_len", cfg.calibration.seq_len)
    assert cfg.kd.seed == section.get("seed", 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.group_size = 64  # type: ignore[misc]


def test_bad_config_names_every_problem_at_once() -> None:
    with pytest.raises(qc.ConfigError) as e:
        qc.parse({"method": "gptq", "group_size": 30, "model_dir": "m", "out_dir": "o", "colour": 1,
                  "gptq": {"scale_search": True, "actorder": "yes"}, "twn": {"search": "fast"},
                  "kd": {"checkpoint_every": 0, "latent_dtype": "int8", "lr": "big"}})
    text = str(e.value)
    for needle in ("group_size must be a multiple of 4", "unknown key colour", "gptq.scale_search",
                   "gptq.actorder", "twn.search", "kd.checkpoint_every", "kd.latent_dtype", "kd.lr"):
        assert needle in text, needle
    with pytest.raises(qc.ConfigError, match="micro_batch"):
        qc.parse({"method": "gptq+kd", "group_size": 32, "model_dir": "m", "out_dir": "o",
                  "kd": {"batch_size": 16, "micro_batch": 3}})


def _imports(path: Path) -> set[str]:
    """Sibling modules of ternforge.quant that `path` imports, at module level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


def test_no_import_cycle_in_the_quant_package() -> None:
    pkg = ROOT / "python" / "ternforge" / "quant"
    mods = {p.stem for p in pkg.glob("*.py")}
    graph = {m: _imports(pkg / f"{m}.py") & mods for m in mods}
    assert "capture" not in mods and "policy" not in mods and "allocate" not in mods
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, f"import cycle: {' -> '.join(path + [m, n])}"
            if n not in state:
                visit(n, path + [m])
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m, [])


KEPT = "model.language_model.layers.3.self_attn.k_proj.weight"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_through_the_same_protocol(method: str, tiny_fetch_dir: Path, tiny_calib: Path,
                                                tmp_path: Path) -> None:
    """One table, one protocol, one writer: keep_float and max_file_bytes honoured, and the same figures in
    the result event (what stages/quantize.ts records) and the report, whatever the method."""
    m = METHODS[method]
    assert m.name == method and isinstance(m.calibrated, bool) and callable(m.run)
    out = tmp_path / "q"
    res = run.main({"method": method, "group_size": 32, "seed": 0, "keep_float": [r"layers\.3\.self_attn\.k_proj"],
                    "max_file_bytes": 600_000, "calibration": {"seq_len": 64, "sequences": 8, "batch_size": 4},
                    "kd": {"steps": 2, "batch_size": 4, "micro_batch": 2, "checkpoint_every": 1},
                    "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib),
                    "work_dir": str(tmp_path / "kd"), "out_dir": str(out)})
    assert set(res) == {"ok", "method", "files", "totals", "ternary_fraction_incl_embedding", "ternary_fraction"}
    assert res["ok"] and res["method"] == method and len(res["files"]) > 1
    index = json.loads((out / "index.json").read_text())
    report = json.loads((out / "quantize_report.json").read_text())
    assert index["files"] == res["files"] == report["files"] and report["totals"] == res["totals"]
    assert index["tensors"][KEPT]["encoding"] == "float"
    ternary = sorted(n for n, t in index["tensors"].items() if t["encoding"] == "ternary")
    assert ternary == report["ternary_tensors"] and len(ternary) == res["totals"]["ternary_tensors"]
    assert (len(ternary) == 0) == (method == "none")
    if method != "none":
        assert KEPT in report["allocation"]["forced_float"]
        assert report["tensors"][KEPT]["why"] == "kept float by profile"
        assert 0.85 < res["ternary_fraction_incl_embedding"] < res["ternary_fraction"] < 0.97
    for name, entry in index["tensors"].items():
        with safe_open(str(out / entry["file"]), framework="pt") as f:
            keys = set(f.keys())
        assert name in keys and ((name + ".scale") in keys) == (entry["encoding"] == "ternary")


def test_onpolicy_phase_runs_the_last_steps_on_the_students_answers_and_resumes_to_the_same_bytes(
        tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = {"method": "gptq+kd", "group_size": 32, "seed": 0,
              "calibration": {"seq_len": 32, "sequences": 4, "batch_size": 4},
              "kd": {"steps": 4, "onpolicy_steps": 2, "batch_size": 2, "checkpoint_every": 1, "seq_len": 16,
                     "sequences": 4, "chat_prompts": 2, "chat_max_new": 6, "schedule": "cosine"},
              "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib), "work_dir": str(tmp_path / "kd")}
    assert run.main({**config, "out_dir": str(tmp_path / "a")})["ok"]
    first = capfd.readouterr()
    assert [json.loads(x)["step"] for x in first.out.splitlines() if '"event": "loss"' in x] == [1, 2, 3, 4]
    assert "at step 2 the student stopped by itself in" in first.err
    report = json.loads((tmp_path / "a" / "quantize_report.json").read_text())
    kd = report["kd"]
    assert kd["steps_done"] == 4 and kd["data"]["onpolicy"]["at_step"] == 2
    assert kd["data"]["onpolicy"]["transcripts"] == 2 and kd["data"]["onpolicy"]["windows"] >= 1
    for phase in ("phase-1", "phase-2"):
        assert json.loads((tmp_path / "kd" / phase / "kd-checkpoint.json").read_text())["step"] == {"phase-1": 2, "phase-2": 4}[phase]
    # A second run with the same work dir trains nothing (both phases are checkpointed) and writes the same codes.
    assert run.main({**config, "out_dir": str(tmp_path / "b")})["ok"]
    again = capfd.readouterr()
    assert '"event": "loss"' not in again.out and "discarding" not in again.err
    files = sorted(p.name for p in (tmp_path / "a").glob("*.safetensors"))
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    assert json.loads((tmp_path / "b" / "quantize_report.json").read_text())["kd"] == kd


def test_onpolicy_steps_beyond_the_steps_or_without_chat_requests_are_refused_before_any_work(tmp_path: Path) -> None:
    base = {"method": "gptq+kd", "group_size": 32, "model_dir": str(tmp_path), "out_dir": str(tmp_path / "o")}
    with pytest.raises(ConfigError, match=r"kd.onpolicy_steps \(5\) must not exceed kd.steps \(4\)"):
        parse({**base, "kd": {"steps": 4, "onpolicy_steps": 5, "chat_prompts": 2}})
    with pytest.raises(ConfigError, match="kd.onpolicy_steps needs chat requests"):
        parse({**base, "kd": {"steps": 4, "onpolicy_steps": 2}})
    assert parse({**base, "kd": {"steps": 4, "onpolicy_steps": 4, "chat_self_prompts": 1}})[0].kd.onpolicy_steps == 4


def test_chat_self_openers_become_a_tuple_and_an_empty_list_is_refused(tmp_path: Path) -> None:
    base = {"method": "gptq+kd", "group_size": 32, "model_dir": str(tmp_path), "out_dir": str(tmp_path / "o")}
    assert parse({**base, "kd": {"chat_self_openers": ["", "How many"]}})[0].kd.chat_self_openers == ("", "How many")
    assert parse(base)[0].kd.chat_self_openers == ("",)
    with pytest.raises(ConfigError, match="kd.chat_self_openers must hold at least one string"):
        parse({**base, "kd": {"chat_self_openers": []}})
    with pytest.raises(ConfigError, match="chat_self_openers must be a list of strings"):
        parse({**base, "kd": {"chat_self_openers": "What"}})


def test_tuned_floats_are_written_in_place_of_the_sources_in_its_dtype_and_only_for_float_tensors(
        tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    import torch

    from ternforge.quant.methods import Job, Outcome, forced_plan
    from ternforge.quant.model import source_tensor_names
    from ternforge.quant.run import write_outcome

    out = tmp_path / "q"
    config = {"method": "gptq+kd", "group_size": 32, "seed": 0, "keep_float": [r"layers\.3\.self_attn\.k_proj"],
              "calibration": {"seq_len": 32, "sequences": 4, "batch_size": 4},
              "kd": {"steps": 3, "batch_size": 2, "seq_len": 16, "sequences": 4, "norm_lr": 0.01,
                     "float_lr": 0.001},
              "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib), "out_dir": str(out)}
    assert run.main(config)["ok"]
    index = json.loads((out / "index.json").read_text())
    moved = json.loads((out / "quantize_report.json").read_text())["kd"]["tuned_floats"]
    text = {n: t for n, t in index["tensors"].items() if not t["exempt"]}
    text_norms = sorted(n for n in text if n.endswith("norm.weight"))
    # The float linears: the small in_proj_a/b and the float budget's matrices (here keep_float's k_proj).
    linears = sorted(n for n, t in text.items() if t["encoding"] == "float" and ("in_proj_a" in n or "in_proj_b" in n
                                                                                 or n.endswith("proj.weight")))
    assert any("in_proj_a" in n for n in linears) and any(n.endswith("proj.weight") and "in_proj" not in n
                                                        for n in linears)
    assert sorted(moved) == sorted(text_norms + linears) and all(v > 0 for v in moved.values())
    src = {}
    for shard in sorted((tiny_fetch_dir / "model").glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            src.update({k: f.get_tensor(k) for k in f.keys()})
    for name, entry in index["tensors"].items():
        if entry["encoding"] != "float":
            continue
        with safe_open(str(out / entry["file"]), framework="pt") as f:
            stored = f.get_tensor(name)
        assert stored.dtype == src[name].dtype
        # The tuned floats differ from the source's; the rest (embedding, conv1d, A_log, exempt MTP) are its bytes.
        assert torch.equal(stored, src[name]) == (name not in moved), name
    # A trained value for a tensor the plan makes ternary, or of another shape, is a method bug: refused, not written.
    cfg, paths = parse({**config, "out_dir": str(tmp_path / "bad")})
    plan = forced_plan(Job(cfg, paths, source_tensor_names(tiny_fetch_dir / "model")))
    ternary = next(n for n, t in index["tensors"].items() if t["encoding"] == "ternary")
    norm = text_norms[0]

    def write(floats: dict) -> None:
        write_outcome(cfg, paths, Outcome(plan, lambda t, W: None, {}, floats), lambda *a: None, "x", "y")

    with pytest.raises(RuntimeError, match="the plan does not keep float"):
        write({ternary: torch.zeros(1)})
    with pytest.raises(RuntimeError, match="not a finite tensor of the source's shape"):
        write({norm: torch.zeros(3)})
    with pytest.raises(RuntimeError, match="not a finite tensor"):
        write({norm: src[norm].float() * float("nan")})


def test_a_negative_rate_is_refused_not_read_as_off(tmp_path: Path) -> None:
    base = {"method": "gptq+kd", "group_size": 32, "model_dir": str(tmp_path), "out_dir": str(tmp_path / "o")}
    with pytest.raises(ConfigError, match=r"kd.norm_lr must not be negative, not -0.001"):
        parse({**base, "kd": {"norm_lr": -1e-3}})
    assert parse({**base, "kd": {"norm_lr": 0}})[0].kd.norm_lr == 0.0
    with pytest.raises(ConfigError, match=r"kd.float_lr must not be negative, not -1e-05"):
        parse({**base, "kd": {"float_lr": -1e-5}})


def test_block_ap_runs_before_the_distillation_and_a_rerun_reuses_its_finished_layers(
        tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    config = {"method": "gptq+kd", "group_size": 32, "seed": 0,
              "calibration": {"seq_len": 32, "sequences": 4, "batch_size": 4},
              "kd": {"steps": 2, "batch_size": 2, "checkpoint_every": 1, "seq_len": 16, "sequences": 4,
                     "block_steps": 3, "block_sequences": 4, "block_batch": 2},
              "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib), "work_dir": str(tmp_path / "kd")}
    assert run.main({**config, "out_dir": str(tmp_path / "a")})["ok"]
    blocks = json.loads((tmp_path / "a" / "quantize_report.json").read_text())["kd"]["block_ap"]
    assert blocks["windows"] == 4 and len(blocks["layers"]) == 4
    assert all(r["after"] < r["before"] and "resumed" not in r for r in blocks["layers"])
    # The distillation's checkpoint gone: the rerun loads every Block-AP layer and distils again from there.
    (tmp_path / "kd" / "kd-checkpoint.json").unlink()
    assert run.main({**config, "out_dir": str(tmp_path / "b")})["ok"]
    again = json.loads((tmp_path / "b" / "quantize_report.json").read_text())["kd"]["block_ap"]
    assert [r["resumed"] for r in again["layers"]] == [True] * 4
    files = sorted(p.name for p in (tmp_path / "a").glob("*.safetensors"))
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_gptq_chat_windows_is_refused_without_the_distillations_chat_transcripts(tmp_path: Path) -> None:
    base = {"group_size": 32, "model_dir": str(tmp_path), "out_dir": str(tmp_path / "o")}
    with pytest.raises(ConfigError, match=r"gptq.chat_windows \(8\) needs the distillation's chat transcripts: "
                                          r"method gptq\+kd, not gptq"):
        parse({**base, "method": "gptq", "gptq": {"chat_windows": 8}})
    with pytest.raises(ConfigError, match="gptq.chat_windows needs chat requests for the teacher to answer"):
        parse({**base, "method": "gptq+kd", "gptq": {"chat_windows": 8}})
    cfg, _ = parse({**base, "method": "gptq+kd", "gptq": {"chat_windows": 8}, "kd": {"chat_self_prompts": 4}})
    assert cfg.gptq.chat_windows == 8
    assert parse({**base, "method": "gptq"})[0].gptq.chat_windows == 0


def test_chat_calibration_spreads_whole_batches_over_the_transcripts() -> None:
    from ternforge.quant.calibration import chat_calibration

    transcripts = [list(range(i * 100, i * 100 + 40)) for i in range(10)]  # 400 tokens: 25 windows of 16
    got = chat_calibration(transcripts, 6, 16, 4)
    assert [tuple(b.shape) for b in got] == [(4, 16)]  # 6 asked, one whole batch of 4
    rows = torch.cat(got)
    starts = [int(r[0]) for r in rows]
    assert starts[0] == 0 and int(rows[-1][-1]) == 939  # the first window and the last whole one
    assert len(set(starts)) == 4
    assert [tuple(b.shape) for b in chat_calibration(transcripts, 100, 16, 4)] == [(4, 16)] * 6  # fewer: 24 of 25
    assert chat_calibration(transcripts, 2, 16, 4) == [] and chat_calibration([[1, 2]], 8, 16, 4) == []


def test_gptq_fits_on_the_teachers_transcripts_too_with_gptq_chat_windows(
        tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = {"method": "gptq+kd", "group_size": 32, "seed": 0,
              "calibration": {"seq_len": 16, "sequences": 4, "batch_size": 2},
              "kd": {"steps": 1, "batch_size": 2, "seq_len": 16, "sequences": 4, "chat_prompts": 4,
                     "chat_max_new": 12},
              "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib)}
    assert run.main({**config, "out_dir": str(tmp_path / "a")})["ok"]
    assert run.main({**config, "gptq": {"chat_windows": 4}, "out_dir": str(tmp_path / "b")})["ok"]
    assert "gptq: 4 windows of the teacher's transcripts join 4 of calibration text" in capfd.readouterr().err
    a, b = (json.loads((tmp_path / d / "quantize_report.json").read_text()) for d in "ab")
    assert "gptq_chat_windows" not in a and b["gptq_chat_windows"] == 4
    assert a["kd"]["data"] == b["kd"]["data"]  # the same distillation data either way
    # GPTQ's Hessians hold the transcripts' inputs: every layer's output error is measured on other inputs.
    assert a["gptq_rel_err"].keys() == b["gptq_rel_err"].keys()
    assert all(a["gptq_rel_err"][n] != b["gptq_rel_err"][n] for n in a["gptq_rel_err"])

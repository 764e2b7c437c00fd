"""Block-AP (blockap.py) on the tiny Qwen3.5-layout model: every layer's output error falls, only the ternary
codes and scales move, the latents end on their codes, a rerun resumes each finished layer from its file to
the same bytes, and a file of other settings or starting codes is trained again, not loaded."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ternforge.quant.blockap import block_loss, block_reconstruct, block_windows
from ternforge.quant.config import KDConfig, kd_problems

from test_distill import _setup

CFG = KDConfig(block_lr=0.02, block_scale_lr=1e-3, block_steps=6, block_sequences=8, block_batch=4)


def test_block_loss_is_relative_per_position_so_one_huge_position_does_not_outweigh_the_rest() -> None:
    target = torch.tensor([[[100.0, 0.0], [1.0, 0.0]]])  # one position a hundred times the other's norm
    assert float(block_loss(target, target)) == 0
    off_big = torch.tensor([[[90.0, 0.0], [1.0, 0.0]]])  # 10% off at the huge position
    off_small = torch.tensor([[[100.0, 0.0], [0.9, 0.0]]])  # 10% off at the small one
    assert float(block_loss(off_big, target)) == pytest.approx(float(block_loss(off_small, target))) == pytest.approx(0.005)


def _state(student_model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in student_model.named_parameters()}


def test_each_layer_moves_closer_to_the_teacher_and_only_codes_and_scales_change(tiny_fetch_dir: Path) -> None:
    teacher, student_model, student, _, seqs = _setup(tiny_fetch_dir / "model")
    before = _state(student_model)
    rep = block_reconstruct(teacher, student_model, student, seqs, CFG)
    assert rep["windows"] == 8 and len(rep["layers"]) == teacher.config.num_hidden_layers
    for rec in rep["layers"]:
        assert rec["ternary"] > 0
        assert rec["after"] < rec["before"], rec
    after = _state(student_model)
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved and all(n.endswith(".U") or n.endswith(".scale") for n in moved), sorted(moved)[:5]
    assert all(p.grad is None for p in student_model.parameters())
    for tl in student.values():  # latents snapped to their codes: the distillation starts from codes
        assert torch.equal(tl.U.detach(), tl.codes().float())


def test_a_rerun_loads_each_finished_layer_and_other_settings_train_again(tiny_fetch_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    teacher, sm_a, st_a, _, seqs = _setup(tiny_fetch_dir / "model")
    rep_a = block_reconstruct(teacher, sm_a, st_a, seqs, CFG, tmp_path)
    files = sorted((tmp_path / "block-ap").glob("layer-*.safetensors"))
    assert len(files) == teacher.config.num_hidden_layers
    (tmp_path / "block-ap" / "layer-1.json").unlink()  # as if interrupted during layer 1: trained again
    _, sm_b, st_b, _, _ = _setup(tiny_fetch_dir / "model")
    rep_b = block_reconstruct(teacher, sm_b, st_b, seqs, CFG, tmp_path)
    assert [r.get("resumed", False) for r in rep_b["layers"]][:2] == [True, False]
    assert _state(sm_a).keys() == _state(sm_b).keys()
    for n, p in _state(sm_b).items():
        assert torch.equal(p, _state(sm_a)[n]), n
    assert rep_b["layers"][1]["after"] == rep_a["layers"][1]["after"]

    _, sm_c, st_c, _, _ = _setup(tiny_fetch_dir / "model")
    rep_c = block_reconstruct(teacher, sm_c, st_c, seqs, replace(CFG, block_steps=3), tmp_path)
    assert not any(r.get("resumed") for r in rep_c["layers"])
    assert "of other settings or data" in capsys.readouterr().err

    _, sm_d, st_d, _, _ = _setup(tiny_fetch_dir / "model")  # other starting codes, same settings and data
    with torch.no_grad():
        next(iter(st_d.values())).U.neg_()
    rep_d = block_reconstruct(teacher, sm_d, st_d, seqs, CFG, tmp_path / "d")
    assert rep_d["digest"] != rep_a["digest"]


def test_off_by_default_and_settings_that_make_no_batch_are_refused(tiny_fetch_dir: Path) -> None:
    teacher, student_model, student, _, seqs = _setup(tiny_fetch_dir / "model")
    before = _state(student_model)
    assert block_reconstruct(teacher, student_model, student, seqs, KDConfig()) == {}
    assert all(torch.equal(p, before[n]) for n, p in _state(student_model).items())
    assert kd_problems(replace(CFG, block_sequences=2)) == [
        "kd.block_sequences (2) must hold at least one batch of kd.block_batch (4) windows"]
    assert kd_problems(replace(CFG, block_steps=0, block_sequences=2)) == []
    assert [b.shape[0] for b in block_windows(seqs, replace(CFG, block_sequences=7, block_batch=3))] == [3, 3]
    with pytest.raises(ValueError, match="make no batch"):
        block_windows(seqs[:2], CFG)

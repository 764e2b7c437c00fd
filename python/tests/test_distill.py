"""Distillation: the STE student starts exactly at its initial codes, lowers the KL to the teacher in a
few steps on a tiny model, resumes from a checkpoint to the same bytes, and exports valid codes."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ternforge.quant import twn
from ternforge.quant.interchange import TernaryTensor
from ternforge.quant.model import load_float_model, module_to_source, source_tensor_names
from ternforge.quant.distill import KDConfig, distill, kd_loss, make_student


def _setup(model_dir: Path):
    torch.manual_seed(0)
    teacher = load_float_model(model_dir)
    student_model = load_float_model(model_dir)
    m2s = module_to_source(student_model, source_tensor_names(model_dir))
    mods = dict(student_model.named_modules())
    init = {}
    for m in m2s:
        if "in_proj_a" in m or "in_proj_b" in m:
            continue
        W_q, scale = twn.quantize(mods[m].weight.detach(), twn.TWNConfig(group_size=32))
        init[m] = TernaryTensor(W_q=W_q, scale=scale, group_size=32)
    student = make_student(student_model, init)
    g = torch.Generator().manual_seed(1)
    seqs = torch.randint(0, int(teacher.config.vocab_size), (8, 32), generator=g)
    return teacher, student_model, student, init, seqs


@torch.no_grad()
def _kl(teacher, student_model, seqs) -> float:
    return float(kd_loss(student_model(input_ids=seqs).logits.float(), teacher(input_ids=seqs).logits.float(), 1.0)[1])


def test_student_starts_at_its_codes_and_distillation_lowers_the_kl(tiny_fetch_dir: Path) -> None:
    teacher, student_model, student, init, seqs = _setup(tiny_fetch_dir / "model")
    for name, tl in student.items():
        assert torch.equal(tl.codes(), init[name].W_q)
        assert torch.allclose(tl.weight_ste(), twn.dequantize(init[name].W_q, init[name].scale, 32))
    before = _kl(teacher, student_model, seqs)
    history = distill(teacher, student_model, student, seqs, KDConfig(steps=12, lr=0.05, scale_lr=5e-3, batch_size=4))
    after = _kl(teacher, student_model, seqs)
    assert len(history) == 12 and all(r["kl"] >= 0 for r in history)
    assert after < 0.8 * before, (before, after)
    for tl in student.values():
        tt = tl.export()
        assert tt.W_q.dtype == torch.int8 and set(tt.W_q.unique().tolist()) <= {-1, 0, 1}
        assert torch.allclose(tl.weight_ste(), twn.dequantize(tt.W_q, tt.scale, 32))


def test_resume_from_a_checkpoint_reaches_the_same_bytes(tiny_fetch_dir: Path, tmp_path: Path) -> None:
    cfg = KDConfig(steps=4, lr=0.05, scale_lr=5e-3, batch_size=4, checkpoint_every=2, hidden_mse=0.5)
    teacher, sm_a, st_a, _, seqs = _setup(tiny_fetch_dir / "model")
    distill(teacher, sm_a, st_a, seqs, cfg)
    _, sm_b, st_b, _, _ = _setup(tiny_fetch_dir / "model")
    first = distill(teacher, sm_b, st_b, seqs, KDConfig(**{**cfg.__dict__, "steps": 2}), tmp_path)
    assert (tmp_path / "kd-checkpoint.safetensors").exists() and len(first) == 2
    _, sm_c, st_c, _, _ = _setup(tiny_fetch_dir / "model")  # a fresh process's view: only the checkpoint
    trained: list[int] = []
    history = distill(teacher, sm_c, st_c, seqs, cfg, tmp_path, on_step=lambda r: trained.append(r["step"]))
    # Resumed, not rerun: this run trained only steps 3 and 4; steps 1 and 2 are the checkpoint's records.
    assert trained == [3, 4]
    assert [r["step"] for r in history] == [1, 2, 3, 4] and history[:2] == first
    for name in st_a:
        assert st_a[name].U.detach().numpy().tobytes() == st_c[name].U.detach().numpy().tobytes()
        assert torch.equal(st_a[name].scale, st_c[name].scale)


def test_cosine_schedule_warms_up_decays_to_zero_and_pins_steps_in_the_digest(tiny_fetch_dir: Path, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import math

    import pytest

    from ternforge.quant.distill import lr_factor

    cfg = KDConfig(steps=10, schedule="cosine", warmup=2)
    assert [round(lr_factor(cfg, s), 4) for s in (0, 1, 2)] == [round(1 / 3, 4), round(2 / 3, 4), 1.0]
    assert lr_factor(cfg, 6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(cfg, 10) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(KDConfig(steps=10), 7) == 1.0
    with pytest.raises(ValueError, match="kd.schedule"):
        lr_factor(KDConfig(schedule="linear"), 0)
    # Block-AP's per-layer half cosine is the same schedule without warmup: 1 at its first step, 0.5 halfway.
    from ternforge.quant.config import schedule_factor
    assert [schedule_factor("cosine", s, 10) for s in (0, 5)] == [1.0, pytest.approx(0.5)]
    # A cosine run's checkpoint is not resumed by a run with another step count (its rates differ).
    teacher, sm, st, _, seqs = _setup(tiny_fetch_dir / "model")
    short = KDConfig(steps=2, lr=0.05, scale_lr=5e-3, batch_size=4, checkpoint_every=1, schedule="cosine")
    h = distill(teacher, sm, st, seqs, short, tmp_path)
    assert h[-1]["lr"] < h[0]["lr"]
    _, sm2, st2, _, _ = _setup(tiny_fetch_dir / "model")
    capsys.readouterr()
    trained: list[int] = []
    longer = distill(teacher, sm2, st2, seqs, KDConfig(**{**short.__dict__, "steps": 3}), tmp_path,
                     on_step=lambda r: trained.append(r["step"]))
    assert trained == [1, 2, 3] and [r["step"] for r in longer] == [1, 2, 3]  # started over
    err = capsys.readouterr().err  # and said so: a discarded checkpoint is never silent
    assert "kd-checkpoint.json is of other settings" in err and "discarding its 2 steps, starting at step 0" in err


def test_teacher_transcripts_are_templated_prompts_with_the_teachers_greedy_answers(tiny_fetch_dir: Path) -> None:
    from ternforge.calib.tokens import load_role
    from ternforge.quant.chatdata import answer, load_tokenizer, snippet_requests, windows

    model_dir = tiny_fetch_dir / "model"
    teacher = load_float_model(model_dir)
    tok = load_tokenizer(model_dir)
    docs = [torch.arange(10, 200, dtype=torch.long) % 97 + 5, torch.arange(300, 420, dtype=torch.long) % 89 + 3]
    requests = snippet_requests(docs, tok, 5, snippet_tokens=16)
    seen: list[tuple[int, int]] = []
    a, stopped = answer(teacher, tok, requests, max_new=6, batch_size=2, on_progress=lambda d, n: seen.append((d, n)))
    b, _ = answer(teacher, tok, requests, max_new=6, batch_size=3)
    assert a == b  # greedy and independent of batching: the same transcripts
    assert seen == [(2, 5), (4, 5), (5, 5)]  # answers done of total, after each batch
    assert len(a) == 5 and 0 <= stopped <= 5
    for t in a:
        text = tok.decode(t)
        assert "<|im_start|>user" in text and "<|im_start|>assistant" in text
    w = windows(a, 8)
    assert w.shape == (sum(len(t) for t in a) // 8, 8)
    assert w.flatten().tolist() == [x for t in a for x in t][: w.numel()]


def test_self_written_requests_are_seeded_distinct_and_leave_the_global_generator_alone(tiny_fetch_dir: Path) -> None:
    from ternforge.quant.chatdata import load_tokenizer, self_requests, user_turn_prefix

    model_dir = tiny_fetch_dir / "model"
    teacher = load_float_model(model_dir)
    tok = load_tokenizer(model_dir)
    assert user_turn_prefix(tok).endswith("<|im_start|>user\n")
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    # A random model's end-of-turn token comes by chance: a hot temperature makes that likely within 64 tokens.
    a = self_requests(teacher, tok, 6, seed=7, max_tokens=64, temperature=4.0, batch_size=4)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = self_requests(teacher, tok, 6, seed=7, max_tokens=64, temperature=4.0, batch_size=4)
    c = self_requests(teacher, tok, 6, seed=8, max_tokens=64, temperature=4.0, batch_size=4)
    assert a == b and a != c
    assert 0 < len(a) <= 6 and len(set(a)) == len(a) and all(x and x == x.strip() for x in a)


def test_self_written_requests_begin_with_the_openers_in_turn(tiny_fetch_dir: Path) -> None:
    from ternforge.quant.chatdata import load_tokenizer, self_requests

    model_dir = tiny_fetch_dir / "model"
    teacher = load_float_model(model_dir)
    tok = load_tokenizer(model_dir)
    openers = ("What", "How many")
    a = self_requests(teacher, tok, 8, seed=7, max_tokens=64, temperature=4.0, batch_size=4, openers=openers)
    assert a and all(x.startswith(openers) for x in a)
    assert {o for o in openers if any(x.startswith(o) for x in a)} == set(openers)
    assert a == self_requests(teacher, tok, 8, seed=7, max_tokens=64, temperature=4.0, batch_size=4, openers=openers)
    free = self_requests(teacher, tok, 8, seed=7, max_tokens=64, temperature=4.0, batch_size=4)
    assert free != a and free == self_requests(teacher, tok, 8, seed=7, max_tokens=64, temperature=4.0, batch_size=4,
                                               openers=("",))
    with pytest.raises(ValueError, match="openers"):
        self_requests(teacher, tok, 2, seed=7, openers=())


def test_chunked_kd_loss_equals_the_full_logit_loss_and_its_gradients(tiny_fetch_dir: Path) -> None:
    from ternforge.quant.distill import _final_hidden, chunked_kd_loss

    teacher, sm, st, _, seqs = _setup(tiny_fetch_dir / "model")
    ids = seqs[:3]
    stop = [int(teacher.config.eos_token_id)]
    full, full_kl = kd_loss(sm(input_ids=ids).logits.float(), teacher(input_ids=ids).logits.float(), 2.0, stop, 3.0)
    full.backward()
    g_full = {n: tl.U.grad.clone() for n, tl in st.items()}
    for tl in st.values():
        tl.U.grad = None
    h_s, _ = _final_hidden(sm, ids, False)
    with torch.no_grad():
        h_t, _ = _final_hidden(teacher, ids, False)
    chunked, chunked_kl = chunked_kd_loss(sm.get_output_embeddings(), h_s, teacher.get_output_embeddings(), h_t, 2.0,
                                          chunk=7, stop_ids=stop, stop_weight=3.0)
    chunked.backward()
    assert torch.allclose(chunked, full, rtol=1e-5, atol=1e-6) and torch.allclose(chunked_kl, full_kl, rtol=1e-5)
    assert not torch.allclose(full, full_kl, rtol=1e-4)  # the weights took part
    for n, tl in st.items():
        assert torch.allclose(tl.U.grad, g_full[n], rtol=1e-4, atol=1e-6), n
    # and through the training loop
    history = distill(teacher, sm, st, seqs, KDConfig(steps=2, lr=0.05, scale_lr=5e-3, batch_size=4, logit_chunk=16,
                                                      hidden_mse=0.5, stop_weight=4.0))
    assert len(history) == 2 and all(math.isfinite(r["kl"]) and math.isfinite(r["hidden_mse"]) for r in history)


def test_stop_weight_counts_each_position_by_the_teachers_end_of_turn_probability() -> None:
    """Two positions: the teacher almost surely stops at the second. Their KLs are averaged with weights 1 and
    about 1 + stop_weight; the plain KL beside it is their unweighted mean; stop_weight 0 gives the plain KL."""
    vocab, stop = 5, 3
    t = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [-9.0, -9.0, -9.0, 9.0, -9.0]])
    s = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 0.0, 0.5, 0.0]])
    per = [float(F.kl_div(F.log_softmax(s[i], -1), F.log_softmax(t[i], -1), log_target=True, reduction="sum"))
           for i in range(2)]
    w = [1 + 10 * float(F.softmax(t[i], -1)[stop]) for i in range(2)]
    loss, kl = kd_loss(s.view(1, 2, vocab), t.view(1, 2, vocab), 1.0, [stop], 10.0)
    assert w[0] < 1.3 and w[1] > 10.9
    assert math.isclose(float(kl), sum(per) / 2, rel_tol=1e-6)
    assert math.isclose(float(loss), (w[0] * per[0] + w[1] * per[1]) / sum(w), rel_tol=1e-6)
    plain, kl0 = kd_loss(s.view(1, 2, vocab), t.view(1, 2, vocab), 1.0, [stop], 0.0)
    assert float(plain) == float(kl0) == float(kl)


def test_micro_batches_accumulate_to_the_full_batch_step(tiny_fetch_dir: Path) -> None:
    """Two micro-batches of 2 rows give the step of one batch of 4 (stop_weight 0: the same mean), up to
    float rounding; checkpointing on or off gives the same bytes."""
    model_dir = tiny_fetch_dir / "model"
    runs = {}
    for name, kw in {"full": {}, "micro": {"micro_batch": 2}, "nockpt": {"grad_checkpointing": False}}.items():
        teacher, student_model, student, _init, seqs = _setup(model_dir)
        hist = distill(teacher, student_model, student, seqs, KDConfig(steps=2, lr=0.05, scale_lr=5e-3, batch_size=4, **kw))
        runs[name] = (hist, {n: tl.U.detach().clone() for n, tl in student.items()})
    differ = total = 0
    for n, U in runs["full"][1].items():
        assert torch.equal(U, runs["nockpt"][1][n]), n
        differ += int(((U - runs["micro"][1][n]).abs() > 1e-4).sum())
        total += U.numel()
    # Adam divides by the gradient's running magnitude: where a gradient is ~0, rounding can flip its sign.
    assert differ / total < 0.01
    for step in (0, 1):
        assert runs["micro"][0][step]["loss"] == pytest.approx(runs["full"][0][step]["loss"], rel=1e-4)


def test_hidden_cos_is_one_minus_cosine_per_position_ignores_norms_and_lowers_while_training(tiny_fetch_dir: Path) -> None:
    """kd.hidden_cos (TernaryLLM's OFF): the term is the mean over layers and positions of 1 - cos; scaling a
    student hidden state leaves it unchanged (an MSE would not); in the loop it enters the loss with its
    weight, is recorded, and distillation with a dominant weight lowers it."""
    from ternforge.quant.distill import _micro_loss, hidden_cos_loss

    t = (torch.zeros(1, 2, 3), torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]]), torch.tensor([[[1.0, 1.0, 0.0], [3.0, 0.0, 0.0]]]))
    s = (torch.zeros(1, 2, 3), torch.tensor([[[5.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]), torch.tensor([[[1.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]]))
    # layer 1: positions at cos 1 and 0 -> 0.5; layer 2: cos 1 and -1 -> 1.0; the embeddings (index 0) are left out
    assert float(hidden_cos_loss(s, t)) == pytest.approx(0.75)
    assert float(hidden_cos_loss(tuple(3 * x for x in s), t)) == pytest.approx(0.75)

    teacher, sm, st, _, seqs = _setup(tiny_fetch_dir / "model")
    ids = seqs[:4]
    off = [x.detach() for x in _micro_loss(teacher, sm, ids, KDConfig(), False, [])]
    on = [x.detach() for x in _micro_loss(teacher, sm, ids, KDConfig(hidden_cos=2.0), True, [])]
    assert float(off[3]) == 0.0 and 0 < float(on[3]) < 2
    assert float(on[0]) == pytest.approx(float(off[0]) + 2.0 * float(on[3]), rel=1e-5)
    history = distill(teacher, sm, st, seqs, KDConfig(steps=12, lr=0.05, scale_lr=5e-3, batch_size=4, hidden_cos=50.0))
    assert all(math.isfinite(r["hidden_cos"]) and r["hidden_cos"] > 0 for r in history)
    with torch.no_grad():
        after = _micro_loss(teacher, sm, ids, KDConfig(hidden_cos=2.0), True, [])
    assert float(after[3]) < 0.8 * float(on[3]), (float(on[3]), float(after[3]))


def test_frozen_weights_give_the_same_outputs_and_are_dropped_afterwards(tiny_fetch_dir: Path) -> None:
    from ternforge.quant.distill import frozen_weights

    _, student_model, student, _, seqs = _setup(tiny_fetch_dir / "model")
    with torch.no_grad():
        live = student_model(input_ids=seqs[:2]).logits
        with frozen_weights(student):
            assert all(tl.frozen is not None and not tl.frozen.requires_grad for tl in student.values())
            frozen = student_model(input_ids=seqs[:2]).logits
    assert torch.equal(live, frozen)
    assert all(tl.frozen is None for tl in student.values())


def test_onpolicy_windows_are_the_students_own_greedy_answers_after_the_data_so_far(tiny_fetch_dir: Path) -> None:
    from ternforge.quant.chatdata import answer, load_tokenizer, windows
    from ternforge.quant.distill import onpolicy_sequences

    model_dir = tiny_fetch_dir / "model"
    teacher, student_model, student, _, seqs = _setup(model_dir)
    tok = load_tokenizer(model_dir)
    requests = ["Name a colour.", "What is two plus two?", "Say hello."]
    k = KDConfig(chat_max_new=12, seq_len=8)
    out, info = onpolicy_sequences(student_model, student, model_dir, requests, seqs[:, :8], k)
    mine, stopped = answer(student_model, tok, requests, 12)
    theirs, _ = answer(teacher, tok, requests, 12)
    assert mine != theirs  # a random model's ternary student answers otherwise than its teacher
    assert torch.equal(out[: seqs.shape[0]], seqs[:, :8])
    assert torch.equal(out[seqs.shape[0]:], windows(mine, 8))
    assert info == {"transcripts": 3, "stopped": stopped, "windows": windows(mine, 8).shape[0],
                    "tokens": sum(len(t) for t in mine)}


def test_tuned_floats_train_from_fp32_masters_resume_exactly_and_must_match_the_rates(
        tiny_fetch_dir: Path, tmp_path: Path) -> None:
    from ternforge.quant.distill import tuned_floats, tuned_names

    base = dict(lr=0.05, scale_lr=5e-3, batch_size=4, checkpoint_every=2)
    teacher, sm_a, st_a, _, seqs = _setup(tiny_fetch_dir / "model")
    cfg = KDConfig(steps=4, norm_lr=1e-2, float_lr=1e-3, **base)
    tuned_a = tuned_floats(sm_a, cfg)
    names = sorted(tuned_a)
    norms = [n for n in names if n.endswith("norm.weight")]
    linears = sorted(n for n in names if n not in norms)
    assert any(".layers.0.input_layernorm" in n for n in norms) and "model.norm.weight" in norms
    # The float linears are exactly those _setup left float (in_proj_a/b): no ternary one, no head or embedding.
    assert linears and all("in_proj_a" in n or "in_proj_b" in n for n in linears)
    assert len(linears) == sum(1 for n, _ in sm_a.named_parameters() if "in_proj_a" in n or "in_proj_b" in n)
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert {tf.lr for n, tf in tuned_a.items() if n in norms} == {1e-2}
    assert {tf.lr for n, tf in tuned_a.items() if n in linears} == {1e-3}
    assert sorted(tuned_names(sm_a, KDConfig(norm_lr=1e-2))) == norms
    assert sorted(tuned_names(sm_a, KDConfig(float_lr=1e-3))) == linears
    assert tuned_names(sm_a, KDConfig()) == {}
    start = {n: tf.master.detach().clone() for n, tf in tuned_a.items()}
    for other in (KDConfig(steps=1, **base), KDConfig(steps=1, norm_lr=1e-2, **base),
                  KDConfig(steps=1, norm_lr=1e-2, float_lr=2e-3, **base)):
        with pytest.raises(ValueError, match="tuned floats differ from those kd.norm_lr"):
            distill(teacher, sm_a, st_a, seqs, other, tuned=tuned_a)
    with pytest.raises(ValueError, match="tuned floats differ"):
        distill(teacher, sm_a, st_a, seqs, KDConfig(steps=1, norm_lr=1e-2, **base))
    distill(teacher, sm_a, st_a, seqs, cfg, tuned=tuned_a)
    params = dict(sm_a.named_parameters())
    for n, tf in tuned_a.items():
        assert not torch.equal(tf.master, start[n]), n  # every tuned float moved
        assert tf.master.dtype == torch.float32 and torch.equal(params[n], tf.master.to(params[n].dtype))
    # Resumed from a checkpoint: the masters and their moments come back, so the same bytes.
    _, sm_b, st_b, _, _ = _setup(tiny_fetch_dir / "model")
    short = KDConfig(**{**cfg.__dict__, "steps": 2})
    distill(teacher, sm_b, st_b, seqs, short, tmp_path, tuned=tuned_floats(sm_b, short))
    _, sm_c, st_c, _, _ = _setup(tiny_fetch_dir / "model")
    tuned_c = tuned_floats(sm_c, cfg)
    trained: list[int] = []
    distill(teacher, sm_c, st_c, seqs, cfg, tmp_path, on_step=lambda r: trained.append(r["step"]), tuned=tuned_c)
    assert trained == [3, 4]
    for n in names:
        assert torch.equal(tuned_a[n].master, tuned_c[n].master), n
    for n in st_a:
        assert torch.equal(st_a[n].U, st_c[n].U) and torch.equal(st_a[n].scale, st_c[n].scale)
    # The teacher's own floats are not the student's: the teacher model is untouched.
    assert all(torch.equal(p, start[n].to(p.dtype)) for n, p in teacher.named_parameters() if n in start)

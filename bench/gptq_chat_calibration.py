"""Bench (not CI): GPTQ alone on calibration text against GPTQ on calibration text plus windows of the
teacher's chat transcripts (`gptq.chat_windows`), each measured against the float model on held-out
documentation windows (fetch-calib's heldout role) and on held-out chat windows (windows of the same
transcripts that GPTQ did not fit on). The transcripts are written as the quantize stage writes them
(distill.kd_sequences with the profile's kd section), optionally with fewer requests.

    $TERNFORGE_VENV/bin/python bench/gptq_chat_calibration.py MODEL_DIR CALIB_DIR [--profile smol]
        [--windows 64] [--chat-prompts N] [--chat-self-prompts N] [--heldout-chat 24] [--out F]

Writes bench/results/gptq-chat-calibration.json unless --out says otherwise.
"""
import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from ternforge.calib.tokens import load_role, sequences  # noqa: E402
from ternforge.quality import compare  # noqa: E402
from ternforge.quant.calibration import chat_calibration, eos_of, prepare  # noqa: E402
from ternforge.quant.chatdata import windows  # noqa: E402
from ternforge.quant.config import parse  # noqa: E402
from ternforge.quant.distill import kd_sequences  # noqa: E402
from ternforge.quant.gptq import run_gptq  # noqa: E402
from ternforge.quant.model import DTYPES, load_float_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("calib_dir")
    ap.add_argument("--profile", default="smol")
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--chat-prompts", type=int)
    ap.add_argument("--chat-self-prompts", type=int)
    ap.add_argument("--heldout-chat", type=int, default=24)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gptq-chat-calibration.json"))
    a = ap.parse_args()
    section = json.loads((ROOT / "profiles" / f"{a.profile}.json").read_text())["stages"]["quantize"]
    cfg, _ = parse({**section, "model_dir": a.model_dir, "out_dir": "unused", "calib_dir": a.calib_dir})
    kd = dataclasses.replace(cfg.kd, **{k: v for k, v in (("chat_prompts", a.chat_prompts),
                                                          ("chat_self_prompts", a.chat_self_prompts)) if v is not None})
    cal = cfg.calibration
    t0 = time.monotonic()
    teacher = load_float_model(a.model_dir, DTYPES[cfg.dtype], cfg.device)
    data = kd_sequences(teacher, a.model_dir, a.calib_dir, kd, eos_of(teacher), cfg.device)
    del teacher
    fitted = chat_calibration(data.transcripts, a.windows, cal.seq_len, cal.batch_size)
    every = windows(data.transcripts, cal.seq_len)
    taken = {tuple(r.tolist()) for b in fitted for r in b}
    rest = [r for r in every if tuple(r.tolist()) not in taken]
    pick = torch.linspace(0, len(rest) - 1, min(a.heldout_chat, len(rest))).round().long().unique()
    held_chat = torch.stack([rest[int(i)] for i in pick])
    print(f"{len(data.transcripts)} transcripts, {every.shape[0]} windows of {cal.seq_len}: "
          f"{sum(b.shape[0] for b in fitted)} fitted, {held_chat.shape[0]} held out "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    ref = load_float_model(a.model_dir, torch.float32)
    held_docs = sequences(load_role(a.calib_dir, "heldout"), cal.seq_len, cal.sequences, eos_of(ref))
    rows = {}
    for name, extra in (("calibration text", []), (f"text + {a.windows} chat windows", fitted)):
        prep = prepare(a.model_dir, a.calib_dir, cfg)
        prep.batches = prep.batches + extra
        _, report = run_gptq(prep, cfg)
        prep.model.float()
        row = {}
        for what, seqs in (("heldout_docs", held_docs), ("heldout_chat", held_chat)):
            r = compare(ref, prep.model, seqs, cal.batch_size)
            row[what] = {k: round(r[k], 4) for k in ("ppl_ratio", "top1_agreement", "kl")}
        rows[name] = row
        print(f"{name:>28}: docs ppl {row['heldout_docs']['ppl_ratio']:.2f}x KL {row['heldout_docs']['kl']:.3f} | "
              f"chat ppl {row['heldout_chat']['ppl_ratio']:.2f}x KL {row['heldout_chat']['kl']:.3f} "
              f"top-1 {row['heldout_chat']['top1_agreement']:.3f}", flush=True)
    out = {"profile": a.profile, "group_size": cfg.group_size, "calibration": dataclasses.asdict(cal),
           "chat_prompts": kd.chat_prompts, "chat_self_prompts": kd.chat_self_prompts,
           "transcripts": len(data.transcripts), "chat_windows_fitted": sum(b.shape[0] for b in fitted),
           "heldout_chat_windows": int(held_chat.shape[0]), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

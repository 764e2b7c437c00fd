"""Chat transcripts written by the full-precision teacher, for distillation.

Distilling only on raw calibration text (documentation, web text) keeps a student's next-token statistics
on that text but not its behaviour inside the chat template: on `smol` such a student answered every chat
request with looping documentation prose and never produced the end-of-turn token. So distillation also
sees the teacher's own answers: prompts are built from calibration text (each a snippet of a calibration
document inside one of a few fixed instructions), rendered with the model's chat template, and answered
greedily by the teacher up to `max_new` tokens. A transcript keeps the teacher's end-of-turn token, so the
student learns where an answer stops. Only `calibration` text is used, and nothing here is a benchmark item.

Deterministic: snippets are chosen evenly over the documents in manifest order, generation is greedy.
"""
from __future__ import annotations

from pathlib import Path

import torch

INSTRUCTIONS = (
    "Summarize the following text in one or two sentences.\n\n{snippet}",
    "What is this text about? Answer briefly.\n\n{snippet}",
    "Explain the following to a beginner in a few sentences.\n\n{snippet}",
    "Give one short example that illustrates the following.\n\n{snippet}",
)


def snippets(docs: list[torch.Tensor], tokenizer, n: int, tokens: int) -> list[str]:
    """`n` text snippets of about `tokens` tokens, spread evenly over every document's windows."""
    windows = [(d, s) for d in range(len(docs)) for s in range(0, max(1, docs[d].numel() - tokens // 2), tokens)]
    if not windows:
        raise ValueError("no calibration documents to build chat prompts from")
    picked = [windows[(i * len(windows)) // n] for i in range(n)] if n <= len(windows) else \
        [windows[i % len(windows)] for i in range(n)]
    out = []
    for d, s in picked:
        text = tokenizer.decode(docs[d][s:s + tokens].tolist(), skip_special_tokens=True)
        out.append(" ".join(text.split()))
    return out


@torch.no_grad()
def teacher_transcripts(teacher: torch.nn.Module, tokenizer, docs: list[torch.Tensor], n: int, max_new: int,
                        snippet_tokens: int = 64, batch_size: int = 16, device: str = "cpu") -> tuple[list[list[int]], int]:
    """Token ids of `n` chat transcripts: the templated prompt, then the teacher's greedy answer (ending with
    its end-of-turn token unless it ran out of `max_new`); and how many answers stopped by themselves."""
    eos = teacher.generation_config.eos_token_id if getattr(teacher, "generation_config", None) else None
    eos = eos if eos is not None else teacher.config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids))
    prompts = []
    for i, snip in enumerate(snippets(docs, tokenizer, n, snippet_tokens)):
        messages = [{"role": "user", "content": INSTRUCTIONS[i % len(INSTRUCTIONS)].format(snippet=snip)}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    out: list[list[int]] = []
    stopped = 0
    teacher.eval()
    for b in range(0, len(prompts), batch_size):
        batch = prompts[b:b + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        gen = teacher.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new,
                               do_sample=False, eos_token_id=sorted(eos_ids), pad_token_id=pad)
        for i, p in enumerate(batch):
            answer = gen[i, width:].tolist()
            stop = next((k for k, t in enumerate(answer) if t in eos_ids), None)
            out.append(p + (answer[:stop + 1] if stop is not None else answer))
            stopped += stop is not None
    return out, stopped


def windows(transcripts: list[list[int]], seq_len: int) -> torch.Tensor:
    """[m, seq_len] windows over the transcripts joined end to end (each already ends in its stop token)."""
    stream = torch.tensor([t for tr in transcripts for t in tr], dtype=torch.long)
    m = stream.numel() // seq_len
    return stream[: m * seq_len].reshape(m, seq_len)


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))

"""Token log-probabilities: what the engines compute and the three JSON shapes they travel in.

`TokenLogprob` is one scored token: its log-probability under the model's raw next-token distribution (the
forward pass's logits through log_softmax: before penalties, temperature and top_p, vLLM's default
`raw_logprobs`) and the `top` most likely tokens there, most likely first.

- upstream wire format (vLLM's legacy completions `logprobs` with `return_tokens_as_token_ids`): tokens as
  `"token_id:N"`, the same keys in `top_logprobs`; what the built-in upstream sends and what vLLM sends.
- OpenAI legacy completions: `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`, tokens as text;
  each `top_logprobs` entry holds the scored token and the top k (so k or k + 1 keys, as vLLM); a position
  without a logprob (the prompt's first token under echo) is null in both lists.
- OpenAI chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.
-inf is written as -9999.0, as OpenAI and vLLM do (JSON has no infinity).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

FLOOR = -9999.0
_ID_PREFIX = "token_id:"


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _json_logprob(x: float) -> float:
    return FLOOR if math.isnan(x) else max(x, FLOOR)


def legacy(entries: Sequence[TokenLogprob | None], tokens: Sequence[int], name: Callable[[int], str],
           offset: int = 0) -> dict:
    """The legacy completions object for `tokens` (entries[i] scores tokens[i], or is None); text_offset counts
    the characters of the token names from `offset`, as vLLM does."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for tok, e in zip(tokens, entries):
        text = name(tok)
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        if e is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        out["token_logprobs"].append(_json_logprob(e.logprob))
        top: dict[str, float] = {text: _json_logprob(e.logprob)}
        for t, lp in e.top:
            top.setdefault(name(t), _json_logprob(lp))
        out["top_logprobs"].append(top)
    return out


def token_id_name(token: int) -> str:
    return f"{_ID_PREFIX}{token}"


def _parse_id(name: Any) -> int:
    if not isinstance(name, str) or not name.startswith(_ID_PREFIX):
        raise ValueError(f"expected a {_ID_PREFIX}N token, got {name!r}")
    return int(name[len(_ID_PREFIX):])


def parse_wire(obj: Any) -> list[TokenLogprob | None]:
    """The entries of an upstream's legacy `logprobs` object whose tokens are `token_id:N` (ValueError if not)."""
    if obj is None:
        return []
    tokens, lps, tops = obj.get("tokens") or [], obj.get("token_logprobs") or [], obj.get("top_logprobs") or []
    if not len(tokens) == len(lps) == len(tops):
        raise ValueError("logprobs lists of different lengths")
    out: list[TokenLogprob | None] = []
    for name, lp, top in zip(tokens, lps, tops):
        token = _parse_id(name)
        if lp is None:
            out.append(None)
            continue
        ranked = sorted(((_parse_id(k), float(v)) for k, v in (top or {}).items()), key=lambda kv: -kv[1])
        out.append(TokenLogprob(token, float(lp), tuple(ranked)))
    return out


def chat(entries: Sequence[TokenLogprob], name: Callable[[int], str], top_k: int) -> dict:
    """The chat completions `logprobs` object for the answer's tokens, with `top_k` alternatives each."""
    def item(token: int, lp: float) -> dict:
        text = name(token)
        return {"token": text, "logprob": _json_logprob(lp), "bytes": list(text.encode("utf-8"))}

    return {"content": [{**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top[:top_k]]}
                        for e in entries]}

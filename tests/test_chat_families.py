"""``render_chat`` against transformers 5.24 on the real chat templates of ten models from nine families
(issue 44, item 6): the same conversations — tools, multi-turn reasoning under each name clients
send it, assistant prefill — render to identical strings, offline.

The templates are stored verbatim in ``tests/data/templates/<org>--<model>/`` in the layout
transformers 5 saves a tokenizer in (``chat_template.jinja``, named ones under
``additional_chat_templates/``); ``tests/data/README.md`` gives each file's source.  Each test
builds the folder a model's tokenizer would be — those files, a ``tokenizer_config.json`` with
the model's special tokens (values and their sources in :data:`FAMILIES`) and a two-entry
``tokenizer.json`` (the vocabulary does not enter the rendered text) — and renders it twice:
``AutoTokenizer.from_pretrained(folder).apply_chat_template(..., tokenize=False)`` and
``ldf.render_chat(..., tokenizer_config=folder)``.  Where transformers refuses a conversation (a
template's ``raise_exception``, or no template to use), ``render_chat`` must refuse it too, with
the template's message; every family must render the cases listed as its ``renders``.

Differences found and fixed while writing this file: named templates picked ``default`` when
tools were passed (transformers picks ``tool_use``, PR #31429); a folder with named templates and
no ``default`` (Hermes 3 here) rendered nothing useful instead of refusing; ``continue_final_message``
was ignored; reasoning sent as ``reasoning`` or ``thinking`` never reached a template reading
``reasoning_content`` (and the reverse for gpt-oss).  Deliberate differences, tested elsewhere: a
``template_name`` the config does not hold is refused (transformers renders the name itself as a
Jinja source), and a value that is not JSON is refused (transformers renders a placeholder).
"""
import datetime
import json
import shutil
from pathlib import Path

import jinja2
import pytest

import llm_dataflow as ldf

transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parent / "data" / "templates"

#: Special tokens per family (the model's tokenizer_config.json names them; the template reads
#: only bos_token and eos_token) and the cases its template must render rather than refuse.
#: Sources of the values: Llama 3 ``<|begin_of_text|>`` — meta-llama/llama-models
#: ``models/llama3/tokenizer.py`` (a946b74, ``bos_id``), Hermes 3 is Llama 3.1's tokenizer; EOS
#: tokens — llama.cpp's ``models/templates/<model>.metadata.json`` written with each template
#: (ochafik/llama.cpp 1e7262b, from the model's generation_config.json and tokenizer_config.json);
#: Mistral ``<s>``/``</s>`` — mistralai/mistral-common ``tokens/tokenizers/base.py``
#: (``SpecialTokens``, 039465d); Gemma ``<bos>`` and Cohere ``<BOS_TOKEN>`` — transformers 5.24's
#: ``GemmaTokenizer`` and ``CohereTokenizer`` defaults; DeepSeek ``<｜begin▁of▁sentence｜>`` —
#: vllm-project/vllm ``vllm/tokenizers/deepseek_v32_encoding.py`` (c3a66b9), DeepSeek's own
#: ``encoding_dsv32.py`` copied.  Phi-3.5's three EOS tokens are all in its metadata; the template
#: writes ``eos_token`` only without a generation prompt and both renderers get the same one.
FAMILIES = {
    "meta-llama--Llama-3.1-8B-Instruct": dict(
        tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill"}),
    "Qwen--Qwen3-0.6B": dict(
        tokens={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill", "prefill_reasoning",
                 "no_thinking"}),
    "openai--gpt-oss-120b": dict(
        tokens={"eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill", "prefill_reasoning",
                 "effort"}),
    "deepseek-ai--DeepSeek-V3.1": dict(
        tokens={"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}, string_args=True,
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill", "thinking_on"}),
    "mistralai--Mistral-Nemo-Instruct-2407": dict(
        tokens={"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill"}),
    "mistralai--Ministral-3-14B-Reasoning-2512": dict(
        tokens={"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill"}),
    "google--gemma-2-2b-it": dict(
        tokens={"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
        no_system=True, renders={"chat", "chat_open", "reasoning_history", "prefill"}),
    "microsoft--Phi-3.5-mini-instruct": dict(
        tokens={"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill"}),
    "CohereForAI--c4ai-command-r7b-12-2024": dict(
        tokens={"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "pad_token": "<PAD>",
                "unk_token": "<UNK>"}, named=True,
        renders={"chat", "chat_open", "tools", "reasoning_tool", "reasoning_history", "prefill", "rag"}),
    "NousResearch--Hermes-3-Llama-3.1-8B": dict(
        tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, named=True,
        renders={"tools", "reasoning_tool", "chat_named"}),
}

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string", "description": "City, e.g. Zürich"}},
                                             "required": ["city"]}}}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _call(string_args: bool) -> dict:
    # an OpenAI-style tool call; the id has the 9 characters Mistral's template insists on
    args = {"city": "Bern"}
    return {"id": "call00001", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(args) if string_args else args}}


def cases(family: str) -> dict:
    """``{case: (messages, kwargs)}`` for one family (kwargs go to both renderers)."""
    f = FAMILIES[family]
    sys_ = [] if f.get("no_system") else [SYSTEM]
    call = _call(f.get("string_args", False))
    chat = sys_ + [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                   {"role": "user", "content": "Who are you? ünïcödé 🙂"}]
    tool_turns = [{"role": "user", "content": "Weather in Bern?"},
                  {"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call00001", "content": "sunny, 21 °C"}]
    # reasoning under the name vLLM's server returns it (``reasoning``, PR #27752) on a tool-call
    # turn after the last user message, where Qwen3, GLM and gpt-oss templates keep it
    reasoning_tool = [dict(m, reasoning="Bern: call the weather tool.") if m.get("tool_calls") else m
                      for m in tool_turns]
    history = [{"role": "user", "content": "2 + 2?"},
               {"role": "assistant", "content": "4", "reasoning_content": "Add two and two."},
               {"role": "user", "content": "And 3 + 3?"},
               {"role": "assistant", "content": "6", "thinking": "Add three and three."}]
    prefill = sys_ + [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "The answer is"}]
    out = {
        "chat": (chat, {"add_generation_prompt": True}),
        "chat_open": (chat + [{"role": "assistant", "content": "I am a model."}], {"add_generation_prompt": False}),
        "tools": (sys_ + tool_turns, {"tools": [TOOL], "add_generation_prompt": True}),
        "reasoning_tool": (sys_ + reasoning_tool, {"tools": [TOOL], "add_generation_prompt": True}),
        "reasoning_history": (history, {"add_generation_prompt": False}),
        "prefill": (prefill, {"continue_final_message": True}),
        "prefill_reasoning": ([{"role": "user", "content": "Name a prime."},
                               {"role": "assistant", "content": "", "reasoning": "Primes below 10:"}],
                              {"continue_final_message": "reasoning_content"}),
        "no_thinking": (chat, {"add_generation_prompt": True, "enable_thinking": False}),
        "effort": (chat, {"add_generation_prompt": True, "reasoning_effort": "high"}),
        "thinking_on": (chat, {"add_generation_prompt": True, "thinking": True}),
    }
    if (DATA / family / "additional_chat_templates" / "rag.jinja").is_file():  # chosen by name
        out["rag"] = (chat, {"add_generation_prompt": True, "template_name": "rag",
                             "documents": [{"title": "Bern", "text": "Bern is the federal city of Switzerland."}]})
    if f.get("named"):
        out["chat_named"] = (chat, {"add_generation_prompt": True, "template_name": "tool_use", "tools": [TOOL]})
    if family.startswith("openai--"):  # gpt-oss reads the prefilled reasoning as ``thinking``
        out["prefill_reasoning"] = (out["prefill_reasoning"][0], {"continue_final_message": "thinking"})
    return out


PAIRS = [(fam, case) for fam in FAMILIES for case in cases(fam)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One tokenizer folder per family: the stored templates, the special tokens, a tiny vocabulary."""
    from tokenizers import Tokenizer, models

    vocab = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    out = {}
    for fam, f in FAMILIES.items():
        d = tmp_path_factory.mktemp(fam)
        shutil.copytree(DATA / fam, d, dirs_exist_ok=True)
        vocab.save(str(d / "tokenizer.json"))
        tokens = dict(f["tokens"])
        # one token as an AddedToken dict, the way most tokenizer_config.json files write them
        tokens["eos_token"] = {"__type": "AddedToken", "content": tokens["eos_token"], "lstrip": False,
                               "normalized": False, "rstrip": False, "single_word": False, "special": True}
        (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **tokens}),
                                                 encoding="utf-8")
        out[fam] = d
    return out


@pytest.fixture(scope="module")
def hf_tokenizers(folders):
    from transformers import AutoTokenizer

    return {fam: AutoTokenizer.from_pretrained(str(d)) for fam, d in folders.items()}


def _both(hf, folder, messages, kwargs):
    """``(transformers' text or exception, ours or exception)``."""
    kw = dict(kwargs)
    name = kw.pop("template_name", None)
    results = []
    for render in (lambda: hf.apply_chat_template(messages, tokenize=False, chat_template=name, **kw),
                   lambda: ldf.render_chat(messages, tokenizer_config=folder, template_name=name,
                                           add_generation_prompt=kw.pop("add_generation_prompt", None), **kw)):
        try:
            results.append(render())
        except Exception as err:  # noqa: BLE001 — compared below
            results.append(err)
    return results


@pytest.mark.parametrize("family,case", PAIRS, ids=[f"{f.split('--')[1]}-{c}" for f, c in PAIRS])
def test_renders_as_transformers(folders, hf_tokenizers, family, case):
    messages, kwargs = cases(family)[case]
    for _ in range(2):  # gpt-oss writes strftime_now("%Y-%m-%d"): retry once if the date turned
        day = datetime.date.today()
        want, got = _both(hf_tokenizers[family], folders[family], messages, kwargs)
        if day == datetime.date.today():
            break
    if isinstance(want, Exception):
        assert case not in FAMILIES[family]["renders"], f"transformers refused a case this family must render: {want}"
        assert isinstance(got, ValueError), f"transformers refused ({want!r}); render_chat returned {got!r}"
        if isinstance(want, jinja2.exceptions.TemplateError):  # the template's own raise_exception message
            assert str(want) in str(got)
        return
    assert not isinstance(got, Exception), f"transformers rendered it; render_chat raised {got!r}"
    assert got == want


def test_every_family_file_is_stored_verbatim_and_listed():
    """Each stored template is named in tests/data/README.md with its source, and no file was
    rewritten (line endings and the final newline are the source's: the SHA-256 prefixes pin them)."""
    import hashlib

    readme = (DATA.parent / "README.md").read_text(encoding="utf-8")
    files = sorted(p for p in DATA.rglob("*.jinja"))
    assert len({p.relative_to(DATA).parts[0] for p in files}) == len(FAMILIES) == 10
    for p in files:
        rel = p.relative_to(DATA).as_posix()
        digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        assert f"`{rel}`" in readme and digest in readme, (rel, digest)

"""Chat templates render as transformers renders them (issue 16, kind 4).

Each real template below is compared with transformers' ``tokenizer.apply_chat_template(...,
tokenize=False)`` (transformers 5.24, a test-only dependency) on several conversations, including
ones the template rejects.  No network: the templates are written here.
"""
import datetime

import jinja2
import pytest

import llm_dataflow as ldf

transformers = pytest.importorskip("transformers")

# Real chat templates, verbatim.  Sources: llama.cpp's models/templates/*.jinja, each written by
# its scripts/get_chat_template.py from the model's Hugging Face tokenizer_config.json (see
# models/templates/README.md in github.com/ggml-org/llama.cpp), read at commit b354d7c of the
# ye-NX/llama.cpp mirror; Mistral-7B-Instruct-v0.2's from llama.cpp's tests/test-chat-template.cpp
# (ggml-org/llama.cpp at 03f94f1), where the template of each named model is copied.

#: google/gemma-2-2b-it
GEMMA2 = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
          "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
          "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

#: mistralai/Mistral-7B-Instruct-v0.2 — closes each assistant turn with ``message['content'] + eos_token``
MISTRAL_V02 = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
               "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

#: mistralai/Mistral-Nemo-Instruct-2407
MISTRAL_NEMO = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS][" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif (message.tool_calls is defined and message.tool_calls is not none) %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- message["content"] + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS]{"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

#: meta-llama/Llama-3.2-3B-Instruct
LLAMA32 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

#: Qwen/Qwen3-0.6B
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""


TOKENS = {"GEMMA2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
          "MISTRAL_V02": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
          "MISTRAL_NEMO": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
          "LLAMA32": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
          "QWEN3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}}
TEMPLATES = {"GEMMA2": GEMMA2, "MISTRAL_V02": MISTRAL_V02, "MISTRAL_NEMO": MISTRAL_NEMO, "LLAMA32": LLAMA32,
             "QWEN3": QWEN3}


@pytest.fixture(scope="module")
def bpe():
    return ldf.train_byte_bpe(vocab_size=300)


def hf_tokenizer(bpe, name):
    """A transformers tokenizer with the model's special tokens (the vocabulary is irrelevant to
    the rendered text)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=bpe, **TOKENS[name])


def tokenizer_config(name):
    """What the model's tokenizer_config.json holds: special tokens (one as an AddedToken dict,
    as many files write them) and the chat template."""
    cfg = {k: v for k, v in TOKENS[name].items()}
    cfg["eos_token"] = {"__type": "AddedToken", "content": cfg["eos_token"], "lstrip": False, "normalized": False,
                        "rstrip": False, "single_word": False}
    return dict(cfg, chat_template=TEMPLATES[name])


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string", "description": "City, e.g. Zürich"}},
                                             "required": ["city"]}}}
BASIC = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "  Hi there  "},
         {"role": "user", "content": "Who are you? ünïcödé 🙂"}]
WITH_SYSTEM = [{"role": "system", "content": "You are a helpful assistant"}] + BASIC
CASES = {
    "GEMMA2": [(BASIC, {}), (BASIC[:1], {})],
    "MISTRAL_V02": [(BASIC, {}), (BASIC + [{"role": "assistant", "content": "I am a model."}], {})],
    "MISTRAL_NEMO": [(BASIC, {}), (WITH_SYSTEM, {}), (WITH_SYSTEM, {"tools": [TOOL]}),
                     (BASIC + [{"role": "assistant", "tool_calls": [{"id": "abc123def", "function": {
                         "name": "get_weather", "arguments": {"city": "Zürich"}}}]},
                               {"role": "tool", "tool_call_id": "abc123def", "content": "sunny"}], {})],
    "LLAMA32": [(BASIC, {"date_string": "26 Jul 2024"}), (WITH_SYSTEM, {"date_string": "01 Jan 2025"}),
                (WITH_SYSTEM, {"date_string": "26 Jul 2024", "tools": [TOOL]}),
                (BASIC + [{"role": "assistant", "tool_calls": [{"function": {"name": "get_weather",
                                                                             "arguments": {"city": "Bern"}}}]},
                          {"role": "ipython", "content": {"temp": 21}}], {"date_string": "26 Jul 2024"})],
    "QWEN3": [(BASIC, {}), (WITH_SYSTEM, {"enable_thinking": False}), (WITH_SYSTEM, {"tools": [TOOL]}),
              (BASIC + [{"role": "assistant", "content": "<think>\nsunny?\n</think>\n\nLet me check.",
                         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Bern"}}}]},
                        {"role": "tool", "content": "sunny"}], {})],
}
PAIRS = [(name, i, gen) for name in CASES for i in range(len(CASES[name])) for gen in (True, False)]


@pytest.mark.parametrize("name,i,gen", PAIRS)
def test_renders_as_transformers(bpe, name, i, gen):
    messages, extra = CASES[name][i]
    extra = dict(extra)
    tools = extra.pop("tools", None)
    want = hf_tokenizer(bpe, name).apply_chat_template(messages, chat_template=TEMPLATES[name], tools=tools,
                                                        tokenize=False, add_generation_prompt=gen, **extra)
    got = ldf.render_chat(messages, gen, tokenizer_config=tokenizer_config(name), tools=tools, **extra)
    assert got == want


@pytest.mark.parametrize("name, messages, match", [
    ("GEMMA2", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
     "System role not supported"),
    ("GEMMA2", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "roles must alternate"),
    ("MISTRAL_V02", [{"role": "system", "content": "x"}], "roles must alternate"),
    ("MISTRAL_NEMO", BASIC + [{"role": "assistant", "tool_calls": [{"id": "short", "function": {
        "name": "f", "arguments": {}}}]}], "Tool call IDs should be alphanumeric strings with length 9"),
    ("LLAMA32", [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}},
                                                       {"function": {"name": "g", "arguments": {}}}]}],
     "only supports single tool-calls"),
])
def test_rejected_conversation_is_rejected_by_both(bpe, name, messages, match):
    with pytest.raises(jinja2.exceptions.TemplateError, match=match):
        hf_tokenizer(bpe, name).apply_chat_template(messages, chat_template=TEMPLATES[name], tokenize=False)
    with pytest.raises(ValueError, match=f"the chat template rejected the conversation: .*{match}"):
        ldf.render_chat(messages, False, tokenizer_config=tokenizer_config(name))


def test_eos_token_closes_mistral_turns():
    """The issue's input: a Mistral/Llama-2 template closes assistant turns with eos_token."""
    msgs = BASIC + [{"role": "assistant", "content": "I am a model."}]
    text = ldf.render_chat(msgs, False, MISTRAL_V02, "<s>", eos_token="</s>")
    assert text == "<s>[INST] Hello [/INST]  Hi there  </s>[INST] Who are you? ünïcödé 🙂 [/INST]I am a model.</s>"
    assert ldf.render_chat(msgs, False, tokenizer_config=tokenizer_config("MISTRAL_V02")) == text
    # without an eos_token the template cannot render (it does not silently drop the token)
    with pytest.raises(ValueError, match="eos_token"):
        ldf.render_chat(msgs, False, MISTRAL_V02, "<s>")


def test_strftime_now_and_date(bpe):
    before = datetime.datetime.now().strftime("%d %b %Y")
    text = ldf.render_chat(BASIC, True, LLAMA32, "<|begin_of_text|>")
    after = datetime.datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {before}" in text or f"Today Date: {after}" in text
    want = hf_tokenizer(bpe, "LLAMA32").apply_chat_template(BASIC, chat_template=LLAMA32, tokenize=False,
                                                             add_generation_prompt=True)
    assert text == want or after != before


def test_loop_controls_generation_block_and_dict(bpe):
    t = ("{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}{% endif %}"
         "{% if loop.index > 3 %}{% break %}{% endif %}{% generation %}[{{ m['content'] }}]{% endgeneration %}"
         "{% endfor %}{{ dict(a=1) | tojson }}{{ {'k': 'é'} | tojson }}")
    msgs = [{"role": "system", "content": "s"}] + [{"role": "user", "content": str(i)} for i in range(5)]
    got = ldf.render_chat(msgs, False, t)
    assert got == '[0][1]{"a": 1}{"k": "é"}'       # loop.index counts the skipped system message
    assert got == hf_tokenizer(bpe, "MISTRAL_V02").apply_chat_template(msgs, chat_template=t, tokenize=False)


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__ }}",
    "{% set ns = namespace(_x=1) %}{{ ns._x }}",
    "{{ messages.append(1) }}",                     # immutable sandbox: no mutation of inputs
])
def test_sandbox_refuses_escapes(template):
    with pytest.raises(ValueError, match="chat template"):
        ldf.render_chat(BASIC, False, template)


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="messages="):
        ldf.render_chat("hello")
    with pytest.raises(ValueError, match=r"messages\[1\]="):
        ldf.render_chat([{"role": "user", "content": "a"}, {"content": "no role"}])
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\]="):
        ldf.render_chat([{"role": "user", "content": object()}])
    with pytest.raises(ValueError, match="template does not compile"):
        ldf.render_chat(BASIC, False, "{% for m in messages %}")
    with pytest.raises(ValueError, match="role 'tool' is not allowed"):
        ldf.render_chat([{"role": "tool", "content": "x"}])                # the book's template
    with pytest.raises(ValueError, match="chat_template name='tool_use'"):
        ldf.render_chat(BASIC, tokenizer_config={"chat_template": [{"name": "default", "template": "x"}]},
                        template_name="tool_use")


def test_none_values_are_dropped_like_transformers(bpe):
    msgs = [{"role": "user", "content": "Hi", "tool_calls": None}]
    want = hf_tokenizer(bpe, "LLAMA32").apply_chat_template(msgs, chat_template=LLAMA32, tokenize=False,
                                                             date_string="26 Jul 2024")
    assert ldf.render_chat(msgs, False, tokenizer_config=tokenizer_config("LLAMA32"),
                           date_string="26 Jul 2024") == want
    assert "tool_calls" not in want and want.endswith("Hi<|eot_id|>")


def test_named_templates_and_tokenizer_config_file(tmp_path):
    import json
    cfg = {"bos_token": "<s>", "eos_token": "</s>",
           "chat_template": [{"name": "default", "template": MISTRAL_V02},
                             {"name": "tool_use", "template": MISTRAL_NEMO}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    a = ldf.render_chat(BASIC, False, tokenizer_config=tmp_path)
    assert a.startswith("<s>[INST] Hello [/INST]")
    b = ldf.render_chat(BASIC, False, tokenizer_config=tmp_path / "tokenizer_config.json", template_name="tool_use")
    assert b.startswith("<s>[INST]Hello[/INST]")


def test_template_files_beside_the_config_take_priority(tmp_path, bpe):
    """transformers 5 saves templates as chat_template.jinja (+ additional_chat_templates/*.jinja)
    and loads them before the JSON's chat_template."""
    import json
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(tokenizer_config("GEMMA2"),
                                                                    chat_template=MISTRAL_V02)))
    (tmp_path / "chat_template.jinja").write_text(GEMMA2)
    assert ldf.render_chat(BASIC, True, tokenizer_config=tmp_path).startswith("<bos><start_of_turn>user\nHello")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text(QWEN3)
    assert ldf.render_chat(BASIC, True, tokenizer_config=tmp_path).startswith("<bos><start_of_turn>user")
    assert ldf.render_chat(BASIC, True, tokenizer_config=tmp_path, template_name="tool_use") == \
        hf_tokenizer(bpe, "QWEN3").apply_chat_template(BASIC, chat_template=QWEN3, tokenize=False,
                                                       add_generation_prompt=True)
    # transformers reading the same folder picks the same templates
    from transformers import AutoTokenizer
    bpe.save(str(tmp_path / "tokenizer.json"))
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(cfg, tokenizer_class="PreTrainedTokenizerFast")))
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for name in (None, "tool_use"):
        kw = {} if name is None else {"chat_template": name}
        assert ldf.render_chat(BASIC, True, tokenizer_config=tmp_path, template_name=name) == \
            tok.apply_chat_template(BASIC, tokenize=False, add_generation_prompt=True, **kw)
    with pytest.raises(ValueError, match="no tokenizer_config.json there"):
        ldf.render_chat(BASIC, tokenizer_config=tmp_path / "missing")


# --- issue 44: template resolution, prefill, reasoning fields as transformers 5.24 -----------------
# Reference: transformers 5.24, tokenization_utils_base.py (apply_chat_template, get_chat_template)
# and utils/chat_template_utils.py (render_jinja_template, _alias_reasoning_fields).

def test_base_model_config_without_template_is_refused_like_transformers(bpe, tmp_path):
    """A base model's tokenizer_config.json holds special tokens only (Mistral-7B-v0.1's shape:
    bos/eos/unk, no chat_template).  It used to render with the book's Llama-3 template, silently;
    transformers refuses (its silent default templates went in PR #30346, huggingface/transformers)."""
    import json

    from transformers import PreTrainedTokenizerFast

    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    with pytest.raises(ValueError, match="tokenizer.chat_template is not set"):
        PreTrainedTokenizerFast(tokenizer_object=bpe, **cfg).apply_chat_template(BASIC, tokenize=False)
    with pytest.raises(ValueError, match="the tokenizer_config dict has no chat_template.*pass template="):
        ldf.render_chat(BASIC, tokenizer_config=cfg)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"{tmp_path / 'tokenizer_config.json'} has no chat_template"):
        ldf.render_chat(BASIC, tokenizer_config=tmp_path)
    # the explicit way out: pass the template (the special tokens still come from the config)
    assert ldf.render_chat(BASIC, False, MISTRAL_V02, tokenizer_config=cfg).startswith("<s>[INST] Hello [/INST]")


def test_named_templates_are_chosen_as_transformers_chooses(bpe):
    """[{"name": "default"}, {"name": "tool_use"}] (Hermes' and Command-R's shape): tools pick
    ``tool_use`` (huggingface/transformers PR #31429), a name picks that one, else ``default``."""
    from transformers import PreTrainedTokenizerFast

    named = [{"name": "default", "template": MISTRAL_V02}, {"name": "tool_use", "template": MISTRAL_NEMO}]
    cfg = dict(TOKENS["MISTRAL_NEMO"], chat_template=named)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, **cfg)
    for kw, starts in (({}, "<s>[INST] Hello [/INST]"), ({"tools": [TOOL]}, "<s>[INST]Hello[/INST]"),
                       ({"tools": []}, "<s>[INST]Hello[/INST]"),    # `tools is not None`, as transformers
                       ({"template_name": "tool_use"}, "<s>[INST]Hello[/INST]"),
                       ({"template_name": "default", "tools": [TOOL]}, "<s>[INST] Hello [/INST]")):
        hf_kw = {"chat_template" if k == "template_name" else k: v for k, v in kw.items()}
        want = tok.apply_chat_template(BASIC, tokenize=False, **hf_kw)
        assert ldf.render_chat(BASIC, False, tokenizer_config=cfg, **kw) == want and want.startswith(starts)
    # no default and no tools: both refuse to pick
    only = dict(cfg, chat_template=named[1:])
    with pytest.raises(ValueError, match="no default specified"):
        PreTrainedTokenizerFast(tokenizer_object=bpe, **only).apply_chat_template(BASIC, tokenize=False)
    with pytest.raises(ValueError, match="none is named 'default'; pass template_name= one of: tool_use"):
        ldf.render_chat(BASIC, False, tokenizer_config=only)
    # a name on a single template is refused (transformers would render the name as Jinja source)
    with pytest.raises(ValueError, match="template_name='tool_use' is not allowed: .* a single chat template"):
        ldf.render_chat(BASIC, tokenizer_config=tokenizer_config("MISTRAL_NEMO"), template_name="tool_use")


def test_empty_conversation_is_refused_like_transformers(bpe):
    with pytest.raises(ValueError, match="empty conversation"):
        hf_tokenizer(bpe, "LLAMA32").apply_chat_template([], chat_template=LLAMA32, tokenize=False)
    with pytest.raises(ValueError, match=r"messages=\[\] is not allowed: an empty conversation"):
        ldf.render_chat([])      # used to render a bare generation prompt


PREFILL = BASIC + [{"role": "assistant", "content": "I am"}]


@pytest.mark.parametrize("name", ["MISTRAL_V02", "LLAMA32", "QWEN3", "GEMMA2"])
def test_continue_final_message_leaves_the_turn_open(bpe, name):
    """Assistant prefill (huggingface/transformers PR #33198; TGI and vLLM's chat API expose the
    same flag): the final message is cut where its text ends, with no end-of-turn token."""
    extra = {"date_string": "26 Jul 2024"} if name == "LLAMA32" else {}
    want = hf_tokenizer(bpe, name).apply_chat_template(PREFILL, chat_template=TEMPLATES[name], tokenize=False,
                                                       continue_final_message=True, **extra)
    got = ldf.render_chat(PREFILL, tokenizer_config=tokenizer_config(name), continue_final_message=True, **extra)
    assert got == want and got.endswith("I am")
    closed = ldf.render_chat(PREFILL, False, tokenizer_config=tokenizer_config(name), **extra)
    assert closed.startswith(got) and len(closed) > len(got)   # the closed turn adds its end-of-turn marker


def test_continue_final_message_on_the_books_template():
    """The book's template: the open turn is the closed one minus its ``<|eot_id|>``."""
    closed = ldf.render_chat(PREFILL, add_generation_prompt=False)
    open_ = ldf.render_chat(PREFILL, continue_final_message=True)
    assert closed == open_ + "<|eot_id|>" and open_.endswith("<|start_header_id|>assistant<|end_header_id|>\n\nI am")


def test_continue_final_message_errors_match_transformers(bpe):
    tok = hf_tokenizer(bpe, "MISTRAL_V02")
    cases = [  # (messages, kwargs, transformers' message, ours)
        (PREFILL, {"add_generation_prompt": True}, "not compatible", "not allowed together"),
        (BASIC[:1] + [{"role": "assistant", "content": "x"}], {"continue_final_message": "reasoning_content"},
         'no "reasoning_content" to continue', "has no 'reasoning_content' to continue"),
        (BASIC[:1] + [{"role": "assistant", "content": "x", "reasoning": "r"}],
         {"continue_final_message": "reasoning_content"}, "not an accepted field", "never reads"),
    ]
    for messages, kw, theirs, ours in cases:
        kw = {"continue_final_message": True, **kw}
        with pytest.raises(ValueError, match=theirs):
            tok.apply_chat_template(messages, chat_template=MISTRAL_V02, tokenize=False, **kw)
        with pytest.raises(ValueError, match=ours):
            ldf.render_chat(messages, tokenizer_config=tokenizer_config("MISTRAL_V02"), **kw)
    drops_last = "{% for m in messages[:-1] %}{{ m['content'] }}{% endfor %}"   # reads content, drops the final one
    with pytest.raises(ValueError, match="does not appear in the chat"):
        tok.apply_chat_template(PREFILL, chat_template=drops_last, tokenize=False, continue_final_message=True)
    with pytest.raises(ValueError, match="does not appear in the rendered chat"):
        ldf.render_chat(PREFILL, template=drops_last, continue_final_message=True)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", "thinking"])
def test_reasoning_reaches_the_template_under_any_name(bpe, field):
    """vLLM's server returns reasoning as ``reasoning`` (vllm-project/vllm PR #27752, formerly
    ``reasoning_content``); Qwen3's template reads ``reasoning_content``, gpt-oss's ``thinking``.
    transformers 5.24 fills every name from whichever is present; so does render_chat (it used to
    drop the reasoning whenever the names differed)."""
    msgs = [{"role": "user", "content": "Weather in Bern?"},
            {"role": "assistant", "content": "", field: "Call the weather tool.",
             "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Bern"}}}]},
            {"role": "tool", "content": "sunny"}]
    want = hf_tokenizer(bpe, "QWEN3").apply_chat_template(msgs, chat_template=QWEN3, tools=[TOOL], tokenize=False,
                                                          add_generation_prompt=True)
    got = ldf.render_chat(msgs, tokenizer_config=tokenizer_config("QWEN3"), tools=[TOOL])
    assert got == want and "<think>\nCall the weather tool.\n</think>" in got
    gpt_oss = "{% for m in messages %}{% if m.thinking is defined %}[{{ m.thinking }}]{% endif %}{% endfor %}"
    assert ldf.render_chat(msgs, False, gpt_oss) == "[Call the weather tool.]"


def test_model_specific_tokens_reach_the_template(tmp_path, bpe):
    """transformers 5.24 passes every other ``*_token`` string of tokenizer_config.json (Gemma 3's
    ``boi_token``, ``image_token``, …) and an ``extra_special_tokens`` dict to the template."""
    import json

    from transformers import AutoTokenizer

    bpe.save(str(tmp_path / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "image_token": "<img>",
           "boi_token": {"__type": "AddedToken", "content": "<boi>", "lstrip": False, "normalized": False,
                         "rstrip": False, "single_word": False, "special": True},
           "extra_special_tokens": {"audio_token": "<aud>"}, "add_bos_token": True,
           "chat_template": "{{ bos_token }}{{ boi_token }}{{ image_token }}{{ audio_token }}"
                            "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    want = AutoTokenizer.from_pretrained(str(tmp_path)).apply_chat_template(BASIC[:1], tokenize=False)
    assert ldf.render_chat(BASIC[:1], False, tokenizer_config=tmp_path) == want == "<s><boi><img><aud>Hello"

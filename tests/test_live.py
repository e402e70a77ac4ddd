"""Tests of llm_dataflow.live: the ipywidgets calculator and its static (no-kernel) Vega-Lite view.

The static view's table is decoded here exactly as the page's Vega expression does
(``table[j][sum_a index_a * stride[j][a]]``) and compared with ``fn`` at every setting.
"""
from __future__ import annotations

import itertools
import json
import re

import pytest

import llm_dataflow as ldf
from llm_dataflow import live

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def kv_toy(batch: int, seq_len: int, dtype: str) -> dict:
    """A calculator-shaped function: ints, floats, strings, a key that depends on a control."""
    if dtype == "int3" and batch == 4:
        raise ValueError("batch=4 is not allowed with dtype='int3'")
    b = {"bf16": 2, "fp8": 1, "int3": 3}[dtype]
    return {"KV bytes": batch * seq_len * b * 1000,          # depends on all three controls
            f"bytes per {dtype} element": b,                 # name and value depend on dtype only
            "seq share": seq_len / 8192,                     # float, depends on seq_len only
            "verdict": "big" if batch * seq_len > 1000 else "small"}


CONTROLS = {"batch": [1, 4, 16], "seq_len": [128, 1024, 8192], "dtype": ["bf16", "fp8", "int3"]}


def spec_of(html_text: str) -> dict:
    m = re.search(r"spec = (\{.*?\});\n", html_text, re.S)
    assert m, "no spec in the static view"
    return json.loads(m.group(1).replace("<\\/", "</"))


def params_of(spec: dict) -> dict:
    return {p["name"]: p["value"] for p in spec["params"]}


def shown(spec: dict, index: tuple[int, ...]) -> dict:
    """{name: value} the page shows for control indices ``index`` (mirrors the Vega expression)."""
    p = params_of(spec)
    out = {}
    for j in range(len(p["ldf_t"])):
        vi = sum(i * s for i, s in zip(index, p["ldf_s"][j]))
        ni = sum(i * s for i, s in zip(index, p["ldf_ns"][j]))
        k = p["ldf_t"][j][vi]
        out[p["ldf_n"][j][ni]] = k if isinstance(k, str) else p["ldf_d"][j][k]
    return out


def test_static_table_equals_the_package_at_every_setting():
    spec = spec_of(live.calculator_html(kv_toy, CONTROLS, title="toy"))
    keys = list(CONTROLS)
    for index in itertools.product(*(range(len(v)) for v in CONTROLS.values())):
        params = {k: CONTROLS[k][i] for k, i in zip(keys, index)}
        try:
            expected = dict(live.calculator_rows(kv_toy(**params)))
        except ValueError as e:
            expected = {"error": f"ValueError: {e}"}
        got = shown(spec, index)
        # a setting with fewer outputs pads with blank names and empty values
        got = {k: v for k, v in got.items() if k.strip()}
        assert got == expected, params


def test_columns_keep_only_the_controls_they_depend_on():
    ok = {"batch": [1, 4, 16], "seq_len": [128, 1024, 8192], "dtype": ["bf16", "fp8"]}   # no error
    p = params_of(spec_of(live.calculator_html(kv_toy, ok)))
    # row 2 "seq share" depends on seq_len only: 3 values, stride 1 on axis 1, 0 elsewhere
    assert p["ldf_s"][2] == [0, 1, 0] and len(p["ldf_t"][2]) == 3
    # row 3 "big"/"small" over the 18 settings: indices into its two distinct strings
    assert p["ldf_d"][3] == ["small", "big"] and set(p["ldf_t"][3]) == {0, 1}
    # its name is constant: one entry
    assert p["ldf_n"][2] == ["seq share"] and p["ldf_ns"][2] == [0, 0, 0]
    # row 1's name depends on dtype only
    assert p["ldf_n"][1] == ["bytes per bf16 element", "bytes per fp8 element"]
    # row 0 depends on everything: the full 18-entry grid, row-major strides (6, 2, 1)
    assert p["ldf_s"][0] == [6, 2, 1] and len(p["ldf_t"][0]) == 18
    # with a setting that raises, the padded rows depend on every control
    q = params_of(spec_of(live.calculator_html(kv_toy, CONTROLS)))
    assert q["ldf_s"][2] == [9, 3, 1]


def test_bar_maxima_use_the_shown_numbers():
    p = params_of(spec_of(live.calculator_html(kv_toy, CONTROLS)))
    assert p["ldf_x"][0] == 16 * 8192 * 3 * 1000   # "393,216,000" parsed back
    assert p["ldf_x"][3] is None                    # "big"/"small": no bar
    assert live._num("1,024") == 1024.0 and live._num("50.0%") == 50.0 and live._num("yes") is None


def test_controls_become_bound_parameters():
    spec = spec_of(live.calculator_html(kv_toy, CONTROLS))
    binds = [p["bind"] for p in spec["params"] if "bind" in p]
    assert [b["input"] for b in binds] == ["range", "range", "select"]
    assert binds[0]["max"] == 2 and binds[2]["labels"] == ["bf16", "fp8", "int3"]
    assert params_of(spec)["ldf_c"][1] == ["128", "1,024", "8,192"]


def test_static_view_is_deterministic_and_self_contained():
    a = live.calculator_html(kv_toy, CONTROLS, title="toy")
    b = live.calculator_html(kv_toy, CONTROLS, title="toy")
    c = live.calculator_html(kv_toy, CONTROLS, title="other")
    assert a == b and a != c
    ids = re.findall(r'id="(ldf-calc-[0-9a-f]{12})"', a)
    assert len(ids) == 1 and ids[0] not in c
    # nothing is loaded by a tag; the only URLs are the CDN fallback used outside the book
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", a)
    assert "window.LDF_VEGA" in a and "data-content_root" in a and "_vendor/vega/vega.min" in a
    assert "0x" not in a                              # nothing for nbval's address sanitizer
    assert len(a.encode()) < 25_000


def test_large_grid_stays_under_the_budget_or_raises():
    def f(x, y, z):
        return {"a": x * y * z, "b": x + y + z, "c": x / (1 + y), "d": "even" if z % 2 == 0 else "odd"}

    big = {"x": list(range(1, 21)), "y": list(range(1, 21)), "z": list(range(1, 13))}   # 4,800 settings
    html_text = live.calculator_html(f, big)
    assert len(html_text.encode()) < live.MAX_STATIC_BYTES

    def g(x, y, z):
        return {f"out{i}": f"{x}-{y}-{z}-{i}-distinct-text" for i in range(8)}

    with pytest.raises(ValueError, match="MAX_STATIC_BYTES"):
        live.calculator_html(g, big)


def test_calculator_keeps_the_widget_and_adds_the_static_view(monkeypatch):
    import ipywidgets as w

    monkeypatch.setenv("LDF_STATIC_VIEWS", "1")
    box = ldf.calculator(kv_toy, CONTROLS, title="toy")
    assert isinstance(box, w.VBox)
    bundle = box._repr_mimebundle_()
    assert WIDGET_MIME in bundle and "text/plain" in bundle
    assert bundle["text/html"] == live.calculator_html(kv_toy, CONTROLS, title="toy")
    head, batch, seq, dtype, out = box.children
    assert isinstance(batch, w.SelectionSlider) and isinstance(dtype, w.Dropdown)
    assert "256,000" in out.value                     # 1 * 128 * 2 * 1000
    seq.value = 8192
    assert "16,384,000" in out.value                  # the callback updates the table, prints nothing


@pytest.mark.parametrize("controls, max_rows, match", [
    ({}, 5000, "controls is empty"),
    ({"batch": []}, 5000, r"controls\['batch'\] is empty"),
    (CONTROLS, 10, "27 settings; at most max_rows=10"),
])
def test_bad_controls_raise(controls, max_rows, match):
    with pytest.raises(ValueError, match=match):
        live.calculator_html(kv_toy, controls, max_rows=max_rows)
    with pytest.raises(ValueError, match=match):
        ldf.calculator(kv_toy, controls, max_rows=max_rows)


def test_hosted_install_cell(tmp_path):
    cfg = tmp_path / "_config.yml"
    cfg.write_text("title: x\nrepository:\n  url: https://github.com/o/r  # the one setting\n"
                   "  branch: dev\nhtml:\n  x: 1\n")
    cell = live.hosted_install_cell(config_path=cfg)
    assert "git+https://github.com/o/r@dev" in cell
    compile(cell, "<cell>", "exec")
    exec(cell, {})    # the package is importable here: the cell does nothing (and must not fail)
    with pytest.raises(ValueError, match="repo_url"):
        live.hosted_install_cell(config_path=tmp_path / "missing.yml")
    # the book's own setting
    assert "git+https://" in live.hosted_install_cell()


# --- controls in slider order, initial value, number formatting, live vs page-build mode -------

def step_toy(tp: int, batch: int) -> dict:
    """Outputs named with units, as the book's calculators name them; one row only at batch > 1."""
    r = {"compute per step (s)": 0.005186806 / tp, "weights (GB)": 140.0 / tp,
         "KV bytes": 2**40 * batch, "ratio": 1 / 3, "critical batch": float("inf") if tp > 8 else 4.5}
    if batch > 1:
        r["extra row"] = "only when batched"
    return r


def test_numeric_controls_are_sorted_and_keep_the_first_listed_value_initial():
    controls = {"tp": [8, 1, 2, 4, 16], "batch": [64, 1, 8]}
    spec = spec_of(live.calculator_html(step_toy, controls))
    assert spec["usermeta"]["controls"] == {"tp": [1, 2, 4, 8, 16], "batch": [1, 8, 64]}
    assert spec["usermeta"]["initial"] == {"tp": 3, "batch": 2}
    assert [p["value"] for p in spec["params"][:2]] == [3, 2]     # the sliders start at 8 and 64
    # the shown table at index (3, 2) is fn(tp=8, batch=64)
    assert shown(spec, (3, 2))["weights"] == "17.50 GB"
    box = ldf.calculator(step_toy, controls)
    tp, batch, out = box.children
    assert [v for _, v in tp.options] == [1, 2, 4, 8, 16] and tp.value == 8 and batch.value == 64
    assert [lab for lab, _ in batch.options] == ["1", "8", "64"]
    with pytest.raises(ValueError, match=r"controls\['tp'\].*repeats a value"):
        live.calculator_html(step_toy, {"tp": [8, 1, 8], "batch": [1]})


def test_values_use_the_units_of_their_names_never_scientific_notation():
    rows = dict(live.calculator_rows(step_toy(16, 2)))
    # the unit moves from the name into the value, in the unit that reads best
    assert rows["compute per step"] == "324 µs" and rows["weights"] == "8.75 GB"
    assert rows["KV bytes"] == "2,199,023,255,552"          # integers exactly
    assert rows["ratio"] == "0.3333" and rows["critical batch"] == "∞"
    assert dict(live.calculator_rows({"t (ms)": float("inf"), "x (MB)": 30064.771, "b": True}))  \
        == {"t": "never", "x": "30.06 GB", "b": "yes"}
    big = {"a (GB)": 330003.182, "b": 1.782e4, "c (s)": 1.028e-05, "d": 1e20, "e (ms)": 184.137}
    text = " ".join(v for _, v in live.calculator_rows(big))
    assert not re.search(r"\d[eE][+-]?\d", text), text
    assert dict(live.calculator_rows(big)) == {"a": "330.00 TB", "b": "17,820", "c": "10.3 µs",
                                               "d": "100,000,000,000,000,000,000", "e": "184 ms"}


def test_bars_read_numbers_in_their_units():
    assert live._num("6.48 ms") == pytest.approx(6.48e-3) and live._num("330.00 TB") == 330e12
    assert live._num("8 (of 16)") == 8 and live._num("1.04 PFLOP") == pytest.approx(1.04e15)
    assert live._num("fits: 21.5 GB") is None and live._num("1,792×") == 1792
    spec = spec_of(live.calculator_html(step_toy, {"tp": [1, 16], "batch": [1, 2]}))
    p = params_of(spec)
    assert p["ldf_u"] == {"GB": 1e9, "ms": 1e-3, "µs": 1e-6}
    assert p["ldf_x"][0] == pytest.approx(5.19e-3)          # "5.19 ms" is the largest step time


def test_every_setting_shows_the_same_number_of_rows():
    controls = {"tp": [1, 16], "batch": [1, 2]}
    spec = spec_of(live.calculator_html(step_toy, controls))
    assert len(params_of(spec)["ldf_t"]) == 6                  # padded to the longest result
    box = ldf.calculator(step_toy, controls)
    out = box.children[-1]
    n = out.value.count("<tr>")
    assert n == 6                                              # corner settings fix the height
    box.children[1].value = 2
    assert out.value.count("<tr>") == n and "only when batched" in out.value


def test_static_views_env(monkeypatch):
    monkeypatch.delenv("LDF_STATIC_VIEWS", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert live.static_views_enabled()                         # nbclient / nbval: build the page
    monkeypatch.setenv("JPY_SESSION_NAME", "/nb/00_overview.ipynb")
    assert not live.static_views_enabled()                     # a reader's JupyterLab kernel
    monkeypatch.setenv("LDF_STATIC_VIEWS", "1")
    assert live.static_views_enabled()
    monkeypatch.setenv("LDF_STATIC_VIEWS", "yes")
    with pytest.raises(ValueError, match="LDF_STATIC_VIEWS='yes'"):
        live.static_views_enabled()


def test_live_kernel_computes_only_what_the_reader_asks(monkeypatch):
    calls = []

    def counted(tp, batch):
        calls.append((tp, batch))
        return step_toy(tp, batch)

    monkeypatch.setenv("LDF_STATIC_VIEWS", "0")
    controls = {"tp": [8, 1, 2, 4, 16], "batch": [1, 2, 4, 8, 16, 32]}
    box = ldf.calculator(counted, controls, title="toy")
    assert len(calls) <= 1 + 2 * 2 + 3                 # corners, the initial table, the text
    bundle = box._repr_mimebundle_()
    page = bundle["text/html"]
    assert "<script" not in page and "ldf-calc-table" in page and "5.19 ms" not in page
    assert "648 µs" in page                            # fn(tp=8, batch=1): 5.19 ms / 8
    assert "tp = 8" in bundle["text/plain"] and "compute per step: 648 µs" in bundle["text/plain"]


def test_the_no_script_table_survives_a_sanitizer():
    """What JupyterLab shows for an untrusted notebook: the card without script/style elements."""
    page = live.calculator_html(step_toy, {"tp": [8, 1, 16], "batch": [1, 2]}, title="toy")
    card = re.sub(r"<(script|style)>.*?</\1>", "", page, flags=re.S)
    assert "<table class='ldf-calc-table'" in card and "tp =</td>" in card
    assert "648 µs" in card and "<b>toy</b>" in card
    assert card.count("<tr>") == 2 + 6                 # 2 controls + rows padded to 6


# --- ldf.progress (measure.py): what a finished measurement leaves in the saved notebook -------

def test_progress_ends_as_one_line_of_text(monkeypatch):
    """In a kernel the bar's display is replaced by "<desc>: <n> steps" — the same text/plain the
    bar carried from the start (what strict nbval compares), never a frozen 0 %."""
    import IPython.display

    from llm_dataflow import measure

    shown_bundles = []

    class Handle:
        def update(self, obj, raw=False):
            shown_bundles.append(("update", obj))

    def fake_display(obj, raw=False, display_id=None):
        shown_bundles.append(("display", obj))
        return Handle()

    monkeypatch.setattr(measure, "_widget_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    got = [x for x in ldf.progress(range(4), desc="memory mountain")]
    assert got == [0, 1, 2, 3]
    (kind0, first), (kind1, last) = shown_bundles
    assert kind0 == "display" and WIDGET_MIME in first and first["text/plain"] == "memory mountain: 4 steps"
    assert kind1 == "update" and last == {"text/plain": "memory mountain: 4 steps"}
    shown_bundles.clear()
    with ldf.progress(total=2, desc="manual") as p:
        p.update(2)
        assert p.bar.value == 2 and p.label.value == "2/2"
    assert shown_bundles[-1] == ("update", {"text/plain": "manual: 2 steps"})


def test_progress_outside_a_kernel_is_a_text_bar():
    from tqdm import tqdm

    bar = ldf.progress(range(3), desc="x")
    assert isinstance(bar, tqdm) and list(bar) == [0, 1, 2]


def test_unit_formatting_helpers_never_use_scientific_notation():
    from llm_dataflow.core.units import fmt_num, fmt_si, fmt_time

    assert fmt_num(18863.496) == "18,863" and fmt_num(0.43383) == "0.4338" and fmt_num(3.0) == "3"
    assert fmt_num(1.23e-5) == "0.0000123" and fmt_num(671026419200) == "671,026,419,200"
    assert fmt_num(float("nan")) == "n/a" and fmt_num(float("inf")) == "∞" and fmt_num(-0.0) == "0"
    assert fmt_time(0.005186) == "5.19 ms" and fmt_time(4.2e-5) == "42 µs" and fmt_time(3600) == "3,600 s"
    assert fmt_time(0) == "0 s" and fmt_time(float("inf")) == "never"
    assert fmt_si(4.18e-3, "s") == "4.18 ms" and fmt_si(1.04e15, "FLOP") == "1.04 PFLOP"
    assert fmt_si(999.7e-3, "s") == "1 s"                 # was "1e+03 ms"
    for x in (1e-12, 9.9996e-7, 0.99996, 999.96, 1e20, 123456.789):
        for text in (fmt_num(x), fmt_time(x), fmt_si(x, "B")):
            assert not re.search(r"\d[eE][+-]?\d", text), (x, text)


@pytest.mark.parametrize("value,template,numbers", [
    ("fits: 21.5 GB of 80.0 GB per GPU", "fits: {0} of {1} per GPU", ["21.5 GB", "80.0 GB"]),
    ("YES: 200,000 > max_position_embeddings 163,840 (computed anyway)",
     "YES: {0} > max_position_embeddings {1} (computed anyway)", ["200,000", "163,840"]),
    ("no (4,096 ≤ 131,072)", "no ({0} ≤ {1})", ["4,096", "131,072"]),
    ("never compute-bound", "never compute-bound", []),
    ("yes", "yes", []),
    ("n/a: no published fp8 peak for A100-80GB-SXM", "n/a: no published fp8 peak for A100-80GB-SXM", []),
    ("6.48 ms", None, None), ("1,024", None, None), ("bf16 / bf16", None, None),
    ("gate_proj", None, None), ("GQA", None, None), ("ValueError: batch=0", None, None),
])
def test_value_templates_keep_numbers_and_names(value, template, numbers):
    got = live.value_template(value)
    assert got == (None if template is None else (template, numbers))
    if got:
        assert live._fill(got[0], got[1]) == value


def test_translated_values_keep_their_numbers():
    card = live.calculator_html(kv_toy, CONTROLS, title="toy")
    assert "big" in live.card_messages(card) and "small" in live.card_messages(card)
    out = live.translate_card(card, lambda s: {"big": "大", "small": "小"}.get(s, s))
    p = params_of(spec_of(out))
    shown_values = set(p["ldf_d"][3] or p["ldf_t"][3])
    assert {"大", "小"} <= shown_values and not {"big", "small"} & shown_values
    assert params_of(spec_of(card))["ldf_t"][0] == p["ldf_t"][0]       # numbers untouched
    # a translation may reorder the numbers of a template
    assert live._fill("每块 GPU 共 {1}，用 {0}", ["21.5 GB", "80.0 GB"]) == "每块 GPU 共 80.0 GB，用 21.5 GB"


def test_page_view_writes_the_readout_and_an_html_table():
    """The view: Vega draws nothing ("none"); the rows are an HTML table; each slider has its own
    <output> written on input and change (after Vega's handlers), and 44 px touch targets."""
    card = live.calculator_html(kv_toy, CONTROLS, title="toy")
    assert '"renderer": "none"' in card and "ldf-calc-rows" in card
    assert '["input", "change"]' in card and 'node("output")' in card
    assert "min-height:44px" in card and "input[type=range]+span{display:none}" in card
    assert "__ID__" not in card and "__SPEC__" not in card and "__CDN__" not in card

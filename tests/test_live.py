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
        out[p["ldf_n"][j][ni]] = p["ldf_t"][j][vi]
    return out


def test_static_table_equals_the_package_at_every_setting():
    spec = spec_of(live.calculator_html(kv_toy, CONTROLS, title="toy"))
    keys = list(CONTROLS)
    for index in itertools.product(*(range(len(v)) for v in CONTROLS.values())):
        params = {k: CONTROLS[k][i] for k, i in zip(keys, index)}
        try:
            expected = {k: live._fmt(v) for k, v in kv_toy(**params).items()}
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
    assert len(a.encode()) < 20_000


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


def test_calculator_keeps_the_widget_and_adds_the_static_view():
    import ipywidgets as w

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

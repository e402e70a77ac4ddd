"""Every chapter notebook: hosted-kernel install cell first, alt text on every figure."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_notebook_hygiene(capsys):
    # in this process: a subprocess would import nbformat again (its schema validators compile
    # lark grammars at import: ~3 s of the test's ~4 s)
    assert _tool().main([]) == 0, capsys.readouterr().out


def test_every_chapter_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"file: notebooks/{nb.stem}\n" in toc, f"{nb.name} is not in _toc.yml"


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebook_hygiene", ROOT / "tools" / "notebook_hygiene.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fix_moves_nbval_markers_into_tags_and_names_the_kernel(tmp_path):
    import nbformat

    tool = _tool()
    nb = nbformat.v4.new_notebook()
    out = nbformat.v4.new_output("stream", name="stdout", text="42 GB/s\n")
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1\n# NBVAL_IGNORE_OUTPUT\n# (measured on this machine)\nprint(x)",
                                  outputs=[out], metadata={"tags": ["hide-input"],
                                            "execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}}),
        nbformat.v4.new_code_cell("# NBVAL_SKIP: needs a GPU\nrun()"),
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\n1 / 0"),
        nbformat.v4.new_markdown_cell("# NBVAL_IGNORE_OUTPUT stays in prose"),
    ]
    path = tmp_path / "00_x.ipynb"
    nbformat.write(nb, path)
    problems = tool.process(path, fix=False)
    assert any("NBVAL_IGNORE_OUTPUT" in p and "cell tag" in p for p in problems)
    assert any("kernelspec" in p for p in problems)
    tool.process(path, fix=True)
    fixed = nbformat.read(path, as_version=4)
    code = [c for c in fixed.cells if c.cell_type == "code"][1:]   # after the install cell
    assert code[0].source == "x = 1\n# (measured on this machine)\nprint(x)"
    assert code[0].metadata["tags"] == ["hide-input", "nbval-ignore-output"]
    assert code[0].outputs == [out] and "execution" not in code[0].metadata   # outputs untouched
    assert code[1].source == "# needs a GPU\nrun()" and code[1].metadata["tags"] == ["nbval-skip"]
    assert code[2].metadata["tags"] == ["raises-exception"]
    assert fixed.cells[-1].source == "# NBVAL_IGNORE_OUTPUT stays in prose"
    assert fixed.metadata["kernelspec"] == tool.KERNELSPEC
    assert not [p for p in tool.process(path, fix=False) if "nbval" in p or "kernelspec" in p]
    before = path.read_bytes()
    tool.process(path, fix=True)
    assert path.read_bytes() == before        # idempotent


def test_kernelspec_is_the_installed_one():
    import json

    r = subprocess.run([sys.executable, "-m", "jupyter_client.kernelspecapp", "list", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        import pytest

        pytest.skip("jupyter kernelspec list failed: " + r.stderr[-300:])
    spec = json.loads(r.stdout)["kernelspecs"]["python3"]["spec"]
    ks = _tool().KERNELSPEC
    assert (spec["display_name"], spec["language"]) == (ks["display_name"], ks["language"])


def test_public_tests_of_assignments_say_expected_and_got():
    """A failing public test tells the student what it expected and what it got: every bare
    ``assert`` in a ``qN_public`` cell carries a message (``np.testing`` prints both itself)."""
    import ast
    import json

    for path in sorted((ROOT / "assignments").glob("*/ch*/ch*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        first = "".join(nb["cells"][0]["source"])
        assert "Run All" in first and "Validate" in first, f"{path}: the first cell explains Run All and Validate"
        for cell in nb["cells"]:
            gid = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
            if not gid.endswith("_public"):
                continue
            tree = ast.parse("".join(cell["source"]))
            bare = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.msg is None]
            assert not bare, f"{path.relative_to(ROOT)} {gid}: assert without a message on line(s) {bare}"


def test_execute_keeps_only_the_widget_state_outputs_show():
    """tools/execute_notebooks.py: closed progress widgets and calculators (whose output has its
    own text/html) leave no state; a widget shown only as a widget keeps its model and every model
    it refers to."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "tools" / "execute_notebooks.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    view = {ex.WIDGET_VIEW: {"model_id": "aa", "version_major": 2, "version_minor": 0}, "text/plain": "x"}
    nb = nbformat.v4.new_notebook()
    calc = {ex.WIDGET_VIEW: {"model_id": "ff", "version_major": 2, "version_minor": 0},
            "text/html": "<div class='ldf-calc-card'>…</div>", "text/plain": "calc"}
    nb.cells = [nbformat.v4.new_code_cell("c", outputs=[nbformat.v4.new_output("display_data", data=view),
                                                        nbformat.v4.new_output("display_data", data=calc)]),
                nbformat.v4.new_code_cell("p", outputs=[nbformat.v4.new_output("display_data",
                                                                               data={"text/plain": "x: 3 steps"})])]
    state = {"aa": {"state": {"children": ["IPY_MODEL_bb"]}}, "bb": {"state": {"layout": "IPY_MODEL_cc"}},
             "cc": {"state": {}}, "dd": {"state": {"children": ["IPY_MODEL_ee"]}}, "ee": {"state": {}},
             "ff": {"state": {"children": ["IPY_MODEL_ee"]}}}
    nb.metadata["widgets"] = {ex.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    assert ex.prune_widget_state(nb) == 3
    assert sorted(nb.metadata["widgets"][ex.WIDGET_STATE]["state"]) == ["aa", "bb", "cc"]
    nb.cells = nb.cells[1:]
    ex.prune_widget_state(nb)
    assert "widgets" not in nb.metadata


def test_one_run_per_notebook_checks(tmp_path):
    """The run stamp and the outputs digest: a notebook whose measured outputs carry two stamps,
    a measuring cell without one, or an output edited after execution fails the hygiene check."""
    import nbformat

    tool = _tool()
    a, b = "[run 0a1b2c · AMD EPYC · 2 CPUs]", "[run ffee00 · Intel Xeon · 2 CPUs]"
    out = lambda text: nbformat.v4.new_output("stream", name="stdout", text=text)  # noqa: E731
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("m()", outputs=[out(f"8.7 GB/s (measured)\n{a}\n")]),
                nbformat.v4.new_code_cell("n()", outputs=[out("42\n")])]
    nb.metadata["llm_dataflow"] = {"outputs_sha256": tool.outputs_digest(nb)}
    assert tool.run_problems(nb, "x") == []
    nb.cells[1].outputs = [out(f"9.1 GB/s (measured)\n{b}\n")]           # pasted from another run
    problems = tool.run_problems(nb, "x")
    assert any("digest differs" in p for p in problems) and any("2 runs" in p for p in problems)
    nb.cells[1].outputs = [out("9.1 GB/s (measured)\n")]                  # no stamp
    nb.metadata["llm_dataflow"] = {"outputs_sha256": tool.outputs_digest(nb)}
    assert tool.run_problems(nb, "x") == ["x: cell 1 prints a measured value without the run stamp"]
    del nb.metadata["llm_dataflow"]
    assert any("no outputs digest" in p for p in tool.run_problems(nb, "x"))


def test_run_stamp_pattern_is_one_everywhere():
    """measure.RUN_STAMP_RE, the hygiene tool's STAMP_RE and the nbval sanitizer's run-stamp
    section are the same expression, and run_stamp() matches it."""
    import configparser
    import re

    import llm_dataflow as ldf

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "tests" / "nbval_sanitize.cfg", encoding="utf-8")
    assert cfg["run-stamp"]["regex"] == ldf.RUN_STAMP_RE == _tool().STAMP_RE.pattern
    stamp = ldf.run_stamp()
    assert re.fullmatch(ldf.RUN_STAMP_RE, stamp) and ldf.RUN_ID in stamp
    assert ldf.run_stamp() == stamp            # one id per process
    assert ldf.stamp_measuring_cells() is False   # outside IPython: nothing to stamp


def test_figure_alt_drops_citations_and_keeps_role_text():
    alt = _tool()._figure_alt("Intro.\n\nFigure: with GPUDirect RDMA {cite}`nvidia_gpudirect_rdma` (green), "
                              "the {term}`KV cache` and {term}`HBM bytes <HBM>` per $B$.\n\nMore.")
    assert alt == "with GPUDirect RDMA (green), the KV cache and HBM bytes per $B$."

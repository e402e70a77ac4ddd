"""The web planner ("Plan a deployment", ``book/planner.md``): ``python -m llm_dataflow plan`` in
the reader's browser.

The page runs the package's standard-library core (``src/llm_dataflow/__init__.py`` and
``src/llm_dataflow/core/``, zipped into the site at build time) in Pyodide and calls exactly
``llm_dataflow.core.plan.main(argv)``, the CLI's entry point, so every number and every error
message on the page is the CLI's by construction.

* The directive ``{ldf-planner}`` writes the form.  Its controls are the CLI's own options, read at
  build time from the ``plan`` parser (:func:`cli_options`): a new CLI option appears on the page
  by itself.  The directive's content is a list of ``- `key`: label`` lines, the page's labels
  and messages; Sphinx translates them through the page's catalog like any other list item, and
  the HTML writer gathers the (translated) labels into the page's JSON spec.
* Only this page loads the planner's script and stylesheet (``_planner/planner.js`` and
  ``planner.css``, added in ``html-page-context`` for a page holding the directive; they are not
  under ``_static/``, whose files every page loads) and, through that script, a Web Worker
  (``_planner/planner-worker.js``) that runs Pyodide from ``_vendor/pyodide/`` off the page's main
  thread (``tools/build_book.sh`` copies it there from the npm package pinned in
  ``web/package.json``; ``book/_ext/ldf_book.py`` serves ``web/dist`` at the site root).
* The form groups the options (:data:`GROUPS`: model, GPU and layout, workload, formats first;
  the engine's settings and the output folded; an option no group names joins the engine's), and
  each field shows its default (the value the last plan used, :data:`RESOLVED`) and the option's
  ``--help`` text: the parser's own in English, the list's ``help_<dest>`` label (translated
  through the catalog, :func:`help_labels`) in another edition.  The page says how many bytes it downloads before it starts
  (:func:`download_sizes`) and counts them as they arrive.
* Without ``web/dist/_vendor/pyodide/`` (a build without npm) the page says that this build
  cannot run the planner and shows the CLI command for the settings.

The directive ``{ldf-explain}`` (same page, after the planner) writes the box that runs
``python -m llm_dataflow explain`` on a pasted command line or startup log through the same worker
(:func:`explain_options` reads that command's parser); its content is its own label list.

``python book/_ext/ldf_planner.py OUT.zip`` writes the core zip alone.
"""
from __future__ import annotations

import argparse
import html
import json
import shutil
import sys
import zipfile
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

HERE = Path(__file__).resolve().parent
ASSETS = HERE / "planner"                 # planner.js, planner.css
ROOT = HERE.parents[1]                    # the repository
SITE_DIR = "_planner"                     # at the site root: the script, stylesheet and core zip
CORE_ZIP = "llm_dataflow_core.zip"
PYODIDE_DIR = "web/dist/_vendor/pyodide"  # relative to the book root (tools/build_book.sh fills it)
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
PYODIDE_MODULES = ("pyodide.mjs", "pyodide.asm.mjs")   # loaded by import(), not by fetch()
ASSET_FILES = ("planner.js", "planner-worker.js", "planner.css")
# The form's groups, in order: (key, the options it holds, folded).  An option of the command
# that no group names (a new one) joins the group marked "rest": the page follows the CLI.
GROUPS = (
    {"key": "model", "dests": ["model"]},
    {"key": "gpu", "dests": ["hardware", "tp", "ep"]},
    {"key": "workload", "dests": ["batch", "context", "prompt"]},
    {"key": "formats", "dests": ["weights", "kv"]},
    {"key": "engine", "dests": ["engine", "engine_version", "gpu_memory_utilization", "mem_fraction_static",
                                "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "cuda_graph_gib",
                                "non_torch_gib", "allow_long_context"], "folded": True, "rest": True},
    {"key": "output", "dests": ["json", "plot"], "folded": True},
)
# Where ``plan --json`` reports the value an option's default resolved to, when its key is not the
# option's own name (``--prompt`` → ``prompt`` needs no entry): the field shows "default: <that>".
RESOLVED = {
    "kv": {"key": "kv_dtype"},
    "non_torch_gib": {"key": "non_torch_bytes_per_gpu", "scale": 2**30, "digits": 2, "unit": "GiB"},
    "mem_fraction_static": {"key": "memory_convention"},
}
# The table's rows shown first, in this order: the verdict, then the KV room.
VERDICT_ROWS = ("memory", "KV room")
# CLI options the page shows (they enter the command line it prints) but does not pass to its
# own main(argv): --plot FILE saves a matplotlib figure, which the page draws itself (the chart).
PAGE_SKIPS = ("plot",)
# The explain box's example: a real failed start (vllm-project/vllm issue #10517, stored verbatim
# in tests/data/logs/ with its address in tests/data/README.md), its model's config.json and its
# GPU, an RTX 3090 (not a preset: the custom spec the README's example gives).
EXPLAIN_EXAMPLE = {"log": "tests/data/logs/vllm-issue-10517-llama31-8b-rtx3090.log",
                   "config": "tests/data/Llama-3.1-8B-Instruct/config.json", "folder": "Llama-3.1-8B-Instruct",
                   "hardware": "name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71,runtime_gib=23.58,nvlink=none"}
# A label ``help_<dest>`` is option ``dest``'s --help text, for a translation (help_labels).
HELP_PREFIX = "help_"
# A fixed time stamp keeps the zip identical between builds of the same sources.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def core_files(src: Path) -> list[tuple[Path, str]]:
    """(file, name in the zip) of the package's ``__init__`` and ``__main__``, its ``core/`` subpackage (the
    Python sources only, no caches) and the published measurements ``plan`` reads
    (``data/published_measurements.csv``)."""
    pkg = src / "llm_dataflow"
    files = [(pkg / "__init__.py", "llm_dataflow/__init__.py"),
             # the command's entry point: the page runs ``python -m llm_dataflow ARGV`` as a shell does
             (pkg / "__main__.py", "llm_dataflow/__main__.py")]
    core = pkg / "core"
    if not core.is_dir():
        raise FileNotFoundError(f"{core}: no core subpackage (llm_dataflow.core) to zip")
    files += [(f, f.relative_to(src).as_posix()) for f in sorted(core.rglob("*.py"))
              if "__pycache__" not in f.parts]
    # the published measurements: plan prints the range the rows covering a deployment imply
    files.append((pkg / "data" / "published_measurements.csv", "llm_dataflow/data/published_measurements.csv"))
    return files


def write_core_zip(out: Path, src: Path = ROOT / "src") -> int:
    """Zip ``src/llm_dataflow/__init__.py`` and ``src/llm_dataflow/core/`` into ``out`` (stored
    names ``llm_dataflow/...``, fixed time stamps); returns the zip's size in bytes.

    Raises:
        FileNotFoundError: ``src/llm_dataflow/core`` is missing.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for path, name in core_files(src):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
    return out.stat().st_size


def _import_core_plan(src: Path):
    """``llm_dataflow.core.plan`` from this checkout's ``src`` (the module the zip holds)."""
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    import importlib

    return importlib.import_module("llm_dataflow.core.plan")


def _plan_parser(plan_module) -> argparse.ArgumentParser:
    """The ``plan`` sub-command's parser as ``main`` builds it: from a ``build_parser()`` when the
    module has one, else by stopping ``main`` at its ``parse_args`` call (build time only)."""
    builder = getattr(plan_module, "build_parser", None)
    if callable(builder):
        parser = builder()
    else:
        class _Stop(Exception):
            pass

        got = {}
        original = argparse.ArgumentParser.parse_args

        def grab(self, *args, **kwargs):
            got["parser"] = self
            raise _Stop

        argparse.ArgumentParser.parse_args = grab
        try:
            plan_module.main(["plan"])
        except _Stop:
            pass
        finally:
            argparse.ArgumentParser.parse_args = original
        parser = got["parser"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and "plan" in action.choices:
            return action.choices["plan"]
    return parser


def parser_options(parser: argparse.ArgumentParser, known=None) -> list[dict]:
    """A parser's options, in its order, as the page's forms need them: ``dest``, ``flag``
    (``None`` for the positional argument), ``kind`` (``model``, ``choice``, ``int``, ``float``,
    ``flag`` or ``text``), ``choices``, ``default``, ``required``, ``metavar``, ``help`` and
    ``suggestions`` (``known(dest)``: the known values of a free-text option, or ``None``)."""
    out = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        flag = next((s for s in a.option_strings if s.startswith("--")), a.option_strings[0] if a.option_strings else None)
        if flag is None:
            kind = "model"
        elif isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            kind = "flag"
        elif a.choices is not None:
            kind = "choice"
        elif a.type is int:
            kind = "int"
        elif a.type is float:
            kind = "float"
        else:
            kind = "text"
        default = a.default if isinstance(a.default, (str, int, float, bool, type(None))) else None
        values = known(a.dest) if (known and kind == "text") else None
        out.append({"dest": a.dest, "flag": flag, "kind": kind,
                    "suggestions": [str(c) for c in values] if values else None,
                    "choices": [str(c) for c in a.choices] if a.choices is not None else None,
                    "default": default, "required": bool(a.required), "metavar": a.metavar,
                    "help": a.help or ""})
    return out


def cli_options(src: Path = ROOT / "src") -> list[dict]:
    """The ``plan`` command's options (:func:`parser_options`).  A free-text option with a list of
    known values (``--hardware``: a preset or a custom spec) offers them as suggestions (an HTML
    datalist); the CLI keeps the list in ``PLAN_<DEST>`` (e.g. ``PLAN_HARDWARE``)."""
    plan = _import_core_plan(src)
    return parser_options(_plan_parser(plan), lambda dest: getattr(plan, f"PLAN_{dest.upper()}", None))


def explain_options(src: Path = ROOT / "src") -> list[dict]:
    """The ``explain`` command's options (``llm_dataflow.core.explain.build_parser``), as
    :func:`parser_options` gives them; ``--hardware`` suggests the ``plan`` command's GPUs.  Empty
    when the core has no ``explain`` command."""
    plan = _import_core_plan(src)
    import importlib

    try:
        explain = importlib.import_module("llm_dataflow.core.explain")
    except ImportError:
        return []
    builder = getattr(explain, "build_parser", None)
    if not callable(builder):
        return []
    return parser_options(builder(), lambda dest: getattr(plan, f"PLAN_{dest.upper()}", None))


def presets(src: Path = ROOT / "src") -> list[str]:
    """The model presets the CLI accepts by name (``MODEL_PRESETS``), in its order."""
    plan = _import_core_plan(src)
    names = getattr(plan, "MODEL_PRESETS", None)
    if names is None:
        import importlib

        names = importlib.import_module("llm_dataflow.core.config").MODEL_PRESETS
    return list(names)


class planner(nodes.General, nodes.Element):
    """The planner's place in the page; its children are the label list (translated by Sphinx)."""


def _verbatim_help(node: nodes.Element) -> None:
    """Keep the ``help_<dest>`` items as typed: Sphinx's smart quotes would turn ``--tp`` into
    ``–tp`` and ``'`` into ``’``, in either edition (a flag must stay a flag, and the English text
    must stay the parser's own, byte for byte)."""
    for item in node.findall(nodes.list_item):
        lit = item.next_node(nodes.literal)
        if lit is not None and lit.astext().startswith(HELP_PREFIX):
            item["support_smartquotes"] = False


class PlannerDirective(Directive):
    """``{ldf-planner}``: the planner form.  Content: a bullet list of ``- `key`: label`` lines."""

    has_content = True

    def run(self):
        node = planner()
        self.state.nested_parse(self.content, self.content_offset, node)
        _verbatim_help(node)
        return [node]


class ExplainDirective(PlannerDirective):
    """``{ldf-explain}``: the box that explains a pasted log.  Content: its label list."""

    def run(self):
        node = planner(explain="1")
        self.state.nested_parse(self.content, self.content_offset, node)
        _verbatim_help(node)
        return [node]


def help_labels(labels: dict[str, str], options: list[dict], language: str, where: str) -> dict[str, str]:
    """The labels a page's spec carries, given the ``help_<dest>`` ones (an option's ``--help``
    text, translatable).  In English the page shows the parser's own ``--help`` (one text, not
    two): each ``help_<dest>`` must equal it, else the build warns (``-W`` fails it), and they are
    left out of the spec.  In another edition they stay: the page shows them in place of the
    parser's English (an untranslated one reads as the parser's text, smart quotes being off)."""
    helps = {f"{HELP_PREFIX}{o['dest']}": o["help"] for o in options if o.get("help")}
    if not language.startswith("en"):
        return labels
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for key, text in labels.items():
        if key.startswith(HELP_PREFIX) and helps.get(key) != text:
            log.warning(f"{where}: label `{key}` is not the parser's --help text {helps.get(key)!r}: {text!r}")
    return {k: v for k, v in labels.items() if not k.startswith(HELP_PREFIX)}


def labels_of(node: nodes.Element) -> dict[str, str]:
    """``{key: label}`` from the directive's list: each item's first inline literal is the key,
    the text after it (less a leading ``:`` or ``：``) the label."""
    out = {}
    for item in node.findall(nodes.list_item):
        para = item.next_node(nodes.paragraph)
        if para is None:
            continue
        lit = para.next_node(nodes.literal)
        if lit is None:
            continue
        text = para.astext()
        rest = text.split(lit.astext(), 1)[1].lstrip()
        out[lit.astext()] = rest[1:].strip() if rest[:1] in (":", "：") else rest.strip()
    return out


def _relative(builder, docname: str, target: str) -> str:
    """URL of the site-root path ``target`` from page ``docname``."""
    return "../" * docname.count("/") + target


def download_sizes(confdir: Path) -> dict:
    """What a first visit of the planner downloads before it can plan, in bytes as served
    uncompressed (a web host's gzip sends less): ``{"files": {name: bytes}, "total", "moduleBytes"}``
    (the Pyodide files, the core zip and the worker script; ``moduleBytes``: the part loaded by
    ``import()``, which the worker cannot count as it streams).  Empty without Pyodide."""
    files = {}
    pyodide = confdir / PYODIDE_DIR
    if all((pyodide / f).is_file() for f in PYODIDE_FILES):
        files.update({f: (pyodide / f).stat().st_size for f in PYODIDE_FILES})
    else:
        return {"files": {}, "total": 0, "moduleBytes": 0}
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for path, name in core_files(confdir / "src"):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
    files[CORE_ZIP] = len(buf.getvalue())
    files["planner-worker.js"] = (ASSETS / "planner-worker.js").stat().st_size
    return {"files": files, "total": sum(files.values()),
            "moduleBytes": sum(files[f] for f in PYODIDE_MODULES)}


def visit_planner_html(self, node):
    if node.get("explain"):
        visit_explain_html(self, node)
    app = self.builder.app
    docname = self.builder.current_docname
    have_pyodide = bool(getattr(app, "ldf_offline", False)) and all(
        (Path(app.confdir) / PYODIDE_DIR / f).is_file() for f in PYODIDE_FILES)
    labels = help_labels(labels_of(node), app.ldf_planner_options, app.config.language or "en", "{ldf-planner}")
    download = app.ldf_planner_download if have_pyodide else {"files": {}, "total": 0, "moduleBytes": 0}
    spec = {
        "options": app.ldf_planner_options,
        "presets": app.ldf_planner_presets,
        "labels": labels,
        "groups": list(GROUPS),
        "resolved": RESOLVED,
        "verdictRows": list(VERDICT_ROWS),
        "prog": "python -m llm_dataflow",
        "command": "plan",
        "pageSkips": list(PAGE_SKIPS),
        "pyodide": _relative(self.builder, docname, "_vendor/pyodide/") if have_pyodide else None,
        "pyodideVersion": app.ldf_pyodide_version,
        "worker": _relative(self.builder, docname, f"{SITE_DIR}/planner-worker.js") if have_pyodide else None,
        "core": _relative(self.builder, docname, f"{SITE_DIR}/{CORE_ZIP}"),
        "download": download,
        "language": app.config.language or "en",
    }
    data = json.dumps(spec, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    # said before anything is downloaded: how much the page will fetch to run the command
    starting = labels.get("starting", "")
    if download["total"]:
        starting = starting.replace("{size}", f"{download['total'] / 1e6:.1f}")
    else:
        starting = labels.get("starting_nopyodide", starting).replace("{size}", "0")
    self.body.append(
        '<div class="ldf-planner" data-ldf-planner="1">'
        f'<script type="application/json" class="ldf-planner-spec">{data}</script>'
        f'<p class="ldf-planner-status" role="status" aria-live="polite" data-state="starting">{html.escape(starting)}</p>'
        f'<noscript><p>{html.escape(labels.get("noscript", ""))} '
        '<code>python -m llm_dataflow plan --help</code></p></noscript>'
        '</div>')
    raise nodes.SkipNode


def explain_example(root: Path = ROOT) -> dict | None:
    """:data:`EXPLAIN_EXAMPLE` with its files' text (``None`` when a file is missing)."""
    try:
        return {"log": (root / EXPLAIN_EXAMPLE["log"]).read_text(encoding="utf-8"),
                "config": (root / EXPLAIN_EXAMPLE["config"]).read_text(encoding="utf-8"),
                "folder": EXPLAIN_EXAMPLE["folder"], "hardware": EXPLAIN_EXAMPLE["hardware"]}
    except OSError:
        return None


def visit_explain_html(self, node):
    """The explain box's place: its spec (the ``explain`` command's options, the model presets,
    the labels); the planner's script mounts it and runs it through the planner's worker."""
    app = self.builder.app
    labels = help_labels(labels_of(node), app.ldf_explain_options, app.config.language or "en", "{ldf-explain}")
    spec = {"options": app.ldf_explain_options, "presets": app.ldf_planner_presets, "labels": labels,
            "prog": "python -m llm_dataflow", "command": "explain", "language": app.config.language or "en",
            "example": explain_example(Path(app.confdir))}
    data = json.dumps(spec, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    self.body.append(
        '<div class="ldf-explain" data-ldf-explain="1">'
        f'<script type="application/json" class="ldf-explain-spec">{data}</script>'
        f'<noscript><p>{html.escape(labels.get("noscript", ""))} '
        '<code>python -m llm_dataflow explain --help</code></p></noscript>'
        '</div>')
    raise nodes.SkipNode


def _skip(self, node):
    raise nodes.SkipNode


def _builder_inited(app) -> None:
    app.ldf_planner_options = cli_options(Path(app.confdir) / "src")
    app.ldf_planner_presets = presets(Path(app.confdir) / "src")
    app.ldf_explain_options = explain_options(Path(app.confdir) / "src")
    app.ldf_planner_download = download_sizes(Path(app.confdir))
    try:
        app.ldf_pyodide_version = json.loads((Path(app.confdir) / "web" / "package.json").read_text())[
            "dependencies"]["pyodide"]
    except (OSError, KeyError, ValueError):
        app.ldf_pyodide_version = None


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """Load the planner's script and stylesheet on the page that holds the planner, only there."""
    if doctree is None or not any(True for _ in doctree.findall(planner)):
        return
    app.add_css_file(f"../{SITE_DIR}/planner.css")
    app.add_js_file(f"../{SITE_DIR}/planner.js", defer="defer")


def _build_finished(app, exception) -> None:
    """Copy the planner's script, worker and stylesheet and write the core zip into ``_planner/``."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / SITE_DIR
    out.mkdir(parents=True, exist_ok=True)
    for f in ASSET_FILES:
        shutil.copyfile(ASSETS / f, out / f)
    write_core_zip(out / CORE_ZIP, Path(app.confdir) / "src")


def setup(app):
    app.add_node(planner, html=(visit_planner_html, None), latex=(_skip, None), text=(_skip, None),
                 man=(_skip, None), texinfo=(_skip, None))
    app.add_directive("ldf-planner", PlannerDirective)
    app.add_directive("ldf-explain", ExplainDirective)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _page_context, priority=500)   # before ldf_book's (900)
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":   # python book/_ext/ldf_planner.py OUT.zip
    target = Path(sys.argv[1] if len(sys.argv) > 1 else CORE_ZIP)
    print(f"{target}: {write_core_zip(target)} bytes")

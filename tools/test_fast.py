"""The authors' inner loop: the fast tests plus strict nbval of the notebooks a change touches.

    python tools/test_fast.py                # what `make test-fast` runs
    python tools/test_fast.py --dry-run      # print the pytest command and why each notebook is in it
    python tools/test_fast.py notebooks/05_prefill_decode_roofline.ipynb   # these notebooks as well

"A change" is every file that differs from the point where this branch left ``main`` (commits
and the working tree, untracked files included), or from ``HEAD`` on ``main`` itself.  A notebook
is touched when

* its own file changed, or
* it uses (``ldf.<name>``, ``ldf.<module>.<name>``, ``from llm_dataflow... import``) a name of a
  package module that changed, or that imports (directly or not) a module that changed — read
  from the modules' ``__all__`` and ``import`` statements with ``ast``, nothing is imported; or
* ``tests/nbval_sanitize.cfg`` changed (it masks every notebook's outputs).

The run is ``pytest -n 2 --dist loadgroup -m "not slow or notebook" tests <notebooks>``: every
test not marked ``slow`` (no browsers, JupyterLab, kernels or processes; see conftest.py)
and the touched notebooks.  ``make test`` runs everything, and is what CI runs.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "llm_dataflow"
NOTEBOOKS = ROOT / "notebooks"


def _git(*args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def changed_files() -> set[str]:
    """Paths (relative to the repository root) changed since this branch left main, or since HEAD."""
    branch = (_git("rev-parse", "--abbrev-ref", "HEAD") or ["HEAD"])[0]
    base = "HEAD"
    if branch != "main" and _git("rev-parse", "--verify", "--quiet", "main"):
        base = (_git("merge-base", "HEAD", "main") or ["HEAD"])[0]
    files = set(_git("diff", "--name-only", base))
    files |= set(_git("ls-files", "--others", "--exclude-standard"))
    return files


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_graph() -> tuple[dict[str, set[str]], dict[str, str]]:
    """({module: modules it imports}, {public name: module defining it}) for the package."""
    imports: dict[str, set[str]] = {}
    names: dict[str, str] = {}
    for path in PKG.rglob("*.py"):
        mod = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.startswith("llm_dataflow"):
                    deps.add(target)
                    deps.update(f"{target}.{a.name}" for a in node.names)   # `from . import x`
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("llm_dataflow"))
            elif isinstance(node, ast.Assign) and path.name != "__init__.py":
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                    try:
                        for n in ast.literal_eval(node.value):
                            names.setdefault(n, mod)
                    except ValueError:
                        pass
        imports[mod] = deps
    modules = set(imports)
    imports = {m: {d for d in deps if d in modules and d != m} for m, deps in imports.items()}
    return imports, names


def _uses(nb_path: pathlib.Path, names: dict[str, str], modules: set[str]) -> set[str]:
    """The package modules whose names a notebook's code cells use."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    used: set[str] = set()
    short = {m.rpartition(".")[2]: m for m in modules}
    for attr in re.findall(r"\bldf\.([A-Za-z_]\w*)", code):
        if attr in names:
            used.add(names[attr])
        elif attr in short:
            used.add(short[attr])
    for mod, what in re.findall(r"from\s+(llm_dataflow[\w.]*)\s+import\s+([^\n]+)", code):
        used.add(mod)
        for n in re.findall(r"\w+", what):
            if n in names:
                used.add(names[n])
    return {u for u in used if u in modules}


def touched_notebooks(changed: set[str]) -> dict[str, str]:
    """{notebook path: why} for the notebooks the changed files touch."""
    imports, names = package_graph()
    changed_mods = {_module_name(ROOT / f) for f in changed
                    if f.startswith("src/llm_dataflow/") and f.endswith(".py") and (ROOT / f).exists()}
    # every module that imports a changed one, directly or not
    affected = set(changed_mods)
    grew = True
    while grew:
        grew = False
        for m, deps in imports.items():
            if m not in affected and deps & affected:
                affected.add(m)
                grew = True
    affected.discard("llm_dataflow")    # the package __init__ re-exports everything
    why: dict[str, str] = {}
    all_nbs = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for nb in all_nbs:
        rel = nb.relative_to(ROOT).as_posix()
        if rel in changed:
            why[rel] = "the notebook changed"
        elif "tests/nbval_sanitize.cfg" in changed:
            why[rel] = "the sanitizer changed"
        else:
            hit = sorted(_uses(nb, names, set(imports)) & affected)
            if hit:
                why[rel] = "uses " + ", ".join(hit[:4]) + (" …" if len(hit) > 4 else "")
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks to check as well")
    ap.add_argument("--dry-run", action="store_true", help="print the command and the reasons only")
    ap.add_argument("-n", "--workers", default=os.environ.get("LDF_TEST_WORKERS", "2"))
    args = ap.parse_args(argv)
    why = touched_notebooks(changed_files())
    for nb in args.notebooks:
        why.setdefault(pathlib.Path(nb).resolve().relative_to(ROOT).as_posix(), "named on the command line")
    for nb, reason in sorted(why.items()):
        print(f"test-fast: {nb}: {reason}")
    if not why:
        print("test-fast: no notebook touched")
    cmd = [sys.executable, "-m", "pytest", "-n", str(args.workers), "--dist", "loadgroup", "-q",
           "-m", "not slow or notebook", "tests", *sorted(why)]
    print("test-fast:", " ".join(cmd[1:]))
    if args.dry_run:
        return 0
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())

"""Write the 简体中文 chapter notebooks, ``notebooks/zh_CN/NN_x.ipynb``, from the English ones.

    python tools/zh_notebooks.py            # (re)write notebooks/zh_CN/ (and its README.md)
    python tools/zh_notebooks.py --check    # exit 1 and list the files that are not current

Colab, Binder and JupyterHub open a notebook by its path in the repository, so the Chinese
edition's launch buttons (``book/_ext/ldf_i18n.py``, ``_zh_launch_links``) can only open a Chinese
notebook that is committed: these files.  Each is the English notebook through its page's catalog
(``locale/zh_CN/LC_MESSAGES/notebooks/NN_x.po``) with the function the zh page's download button
uses, :func:`ldf_i18n.translated_notebook` (markdown, figure alt texts, calculator labels; code and
every other output unchanged: the outputs are the English notebook's committed run), then
:func:`relocate`, because the file lives one folder deeper than the English one.

The catalogs are read from the ``.po`` files and compiled in memory (:func:`catalog`) as Sphinx
compiles them for a build (babel's ``read_po`` / ``write_mo``, fuzzy entries left out:
``sphinx/util/i18n.py``, ``CatalogInfo.write_mo``, Sphinx 7.4.7), so this runs from a clean clone
without a built site.  Output bytes depend only on the English notebooks, the catalogs and the
figures present: a second run changes nothing (``tests/test_zh_notebooks.py``).

Regenerate after executing the notebooks (``make notebooks`` does) and after any edit of a
notebook catalog.
"""
from __future__ import annotations

import argparse
import copy
import gettext
import io
import json
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import ldf_i18n  # noqa: E402  book/_ext/ldf_i18n.py: the site's translation of a notebook

LANGUAGE = "zh_CN"
NOTEBOOKS = ROOT / "notebooks"
#: notebooks/zh_CN/: where the edition's launch buttons look (``ldf_i18n.translated_notebook_path``)
OUT = ROOT / Path(ldf_i18n.translated_notebook_path("notebooks/NN_x.ipynb", LANGUAGE)).parent
LOCALE = ROOT / "locale" / LANGUAGE / "LC_MESSAGES"
#: Sphinx's ``figure_language_filename`` as the book sets it (``_config.yml``; test_zh_notebooks
#: checks the two agree): the translated figure beside the English one.
FIGURE_LANGUAGE_FILENAME = "{path}{basename}.{language}{ext}"
README = """\
# 简体中文 chapter notebooks (generated)

Every `NN_x.ipynb` here is written by `tools/zh_notebooks.py` from `../NN_x.ipynb` and its
catalog `locale/zh_CN/LC_MESSAGES/notebooks/NN_x.po`: the prose, figure alt texts and calculator
labels in Chinese; the code, and the outputs of the English notebook's committed run, unchanged.
They are what the 简体中文 edition's Colab, Binder and JupyterHub buttons open.

Do not edit them by hand: edit the English notebook or the catalog, then run

    PYTHONPATH=src .venv/bin/python tools/zh_notebooks.py

(`make notebooks` runs it after executing the notebooks). `tests/test_zh_notebooks.py` fails when
a file here is not what that command writes.
"""


def chapters() -> list[Path]:
    """The English chapter notebooks, ``notebooks/NN_x.ipynb``, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def catalog(po: Path) -> gettext.GNUTranslations:
    """The catalog ``po`` compiled in memory as Sphinx compiles it to a ``.mo`` (fuzzy entries
    are left out, as with Sphinx's default ``gettext_allow_fuzzy_translations = False``).

    Raises:
        ValueError: ``po`` does not exist.
    """
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    if not po.is_file():
        raise ValueError(f"catalog {po} does not exist: run `tools/i18n.py update` and translate it")
    with open(po, encoding="utf-8") as f:
        messages = read_po(f, LANGUAGE)
    mo = io.BytesIO()
    write_mo(mo, messages, use_fuzzy=False)
    mo.seek(0)
    return gettext.GNUTranslations(mo)


def figure_for_language(target: str, folder: Path = NOTEBOOKS, language: str = LANGUAGE) -> str:
    """``target`` (a path relative to ``folder``) or its translated figure when that file exists,
    named as Sphinx names it (``sphinx.util.i18n.get_image_filename_for_language``)."""
    root, ext = posixpath.splitext(target)
    dirname = posixpath.dirname(root)
    translated = FIGURE_LANGUAGE_FILENAME.format(
        root=root, ext=ext, path=dirname and dirname + "/", basename=posixpath.basename(root),
        docpath="", language=language)
    return translated if (folder / translated).is_file() else target


# a markdown link or image target ](target) or ](target "title"); a {doc} role's target
_LINK = re.compile(r"(\]\()([^)\s]+)")
_DOC = re.compile(r"(\{doc\}`(?:[^`<]*<)?)([^`>]+)(>?`)")
_SIBLING = re.compile(r"[0-9][0-9]_[A-Za-z0-9_]+\.ipynb")


_IMAGE = (".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp")


def _moved(target: str) -> str:
    """A link target of an English notebook, as seen from ``notebooks/zh_CN/``."""
    if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target, re.I):
        return target                                   # URL, anchor or absolute: unchanged
    path, sep, anchor = target.partition("#")
    if _SIBLING.fullmatch(path) and (NOTEBOOKS / path).is_file():
        return target                                   # another chapter: its Chinese notebook
    if path.lower().endswith(_IMAGE):
        path = figure_for_language(path)
    return "../" + path + sep + anchor


def relocate(nb: dict) -> dict:
    """A copy of the notebook ``nb`` (a translated ``notebooks/NN_x.ipynb``) whose relative links
    work from ``notebooks/zh_CN/``: a markdown image ``figures/x.svg`` becomes
    ``../figures/x.zh_CN.svg`` where the Chinese figure exists (else ``../figures/x.svg``; any
    image link, by its extension), any
    other relative link and each ``{doc}`` role's path gain ``../``, and a link to another chapter
    ``NN_x.ipynb`` stays as written (its Chinese notebook is beside this one).  Code cells and
    outputs are not changed: no chapter's code reads a file by a path relative to the notebook
    (``tests/test_zh_notebooks.py::test_code_reads_no_file_beside_the_notebook``)."""
    out = copy.deepcopy(nb)
    for cell in out.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        new = _LINK.sub(lambda m: m.group(1) + _moved(m.group(2)), src)
        new = _DOC.sub(lambda m: m.group(1) + (m.group(2) if m.group(2).startswith("/")
                                               else "../" + m.group(2)) + m.group(3), new)
        if new != src:
            cell["source"] = new.splitlines(keepends=True)
    return out


def zh_notebook(english: Path) -> str:
    """The text of ``notebooks/zh_CN/<english.name>``: the English notebook through its catalog
    (:func:`ldf_i18n.translated_notebook`) and :func:`relocate`, serialized as the site writes the
    zh download (:func:`ldf_i18n.notebook_text`)."""
    nb = json.loads(english.read_text(encoding="utf-8"))
    po = LOCALE / "notebooks" / (english.stem + ".po")
    return ldf_i18n.notebook_text(relocate(ldf_i18n.translated_notebook(nb, catalog(po).gettext)))


def expected() -> dict[Path, str]:
    """Every file of ``notebooks/zh_CN/`` and its text."""
    files = {OUT / p.name: zh_notebook(p) for p in chapters()}
    files[OUT / "README.md"] = README
    return files


def stale(files: dict[Path, str]) -> list[str]:
    """What differs between ``files`` and ``notebooks/zh_CN/``: missing, changed or extra files."""
    out = [f"{p.relative_to(ROOT)}: {'changed' if p.exists() else 'missing'}"
           for p, text in files.items() if not p.is_file() or p.read_bytes() != text.encode("utf-8")]
    out += [f"{p.relative_to(ROOT)}: no English source" for p in sorted(OUT.glob("*"))
            if p not in files]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is not current")
    args = ap.parse_args(argv)
    files = expected()
    problems = stale(files)
    if args.check:
        for p in problems:
            print(p)
        print(f"zh_notebooks: {len(problems)} file(s) not current" if problems
              else f"zh_notebooks: {len(files)} files current")
        return 1 if problems else 0
    OUT.mkdir(exist_ok=True)
    for p in sorted(OUT.glob("*")):
        if p not in files and p.is_file():
            p.unlink()
    for p, text in files.items():
        if not p.is_file() or p.read_bytes() != text.encode("utf-8"):
            p.write_bytes(text.encode("utf-8"))
    print(f"zh_notebooks: {len(problems)} of {len(files)} files written in {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())

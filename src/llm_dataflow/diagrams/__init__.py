"""Diagrams of the book's ideas, drawn as SVG by code, in English and 简体中文.

A chapter's diagrams live in one module of this package (``datapath``, ``layer``, ``paged``, …),
each holding ``DIAGRAMS``: a dict from a file name (``"ch00_datapath"``) to a function
``draw(lang) -> str`` returning the SVG text for ``lang`` (``"en"`` or ``"zh_CN"``).  Numbers on a
diagram come from the package (the core's accounting), never typed: a diagram of a request's
bytes calls the same functions as the chapter's calculator.

``tools/diagrams.py`` writes every diagram to ``notebooks/figures/<name>.svg`` (English) and
``<name>.zh_CN.svg`` (the 简体中文 edition: Sphinx picks it through ``figure_language_filename``);
``tests/test_diagrams.py`` checks that the committed files are what the code draws.  The drawing
primitives, and the phone-legibility rule every diagram obeys, are in :mod:`.svg`.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Callable

from .svg import LANGS

__all__ = ["all_diagrams", "write_diagrams"]


def all_diagrams() -> dict[str, Callable[[str], str]]:
    """Every diagram of the book: file name → ``draw(lang)``, gathered from this package's
    modules (each module's ``DIAGRAMS``), sorted by name.

    Raises:
        ValueError: two modules define the same file name.
    """
    out: dict[str, Callable[[str], str]] = {}
    owner: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "svg":
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for name, draw in getattr(mod, "DIAGRAMS", {}).items():
            if name in out:
                raise ValueError(f"diagram name {name!r} is defined by both {owner[name]} and {info.name}")
            out[name], owner[name] = draw, info.name
    return dict(sorted(out.items()))


def write_diagrams(folder: str | Path, names: list[str] | None = None) -> list[Path]:
    """Write ``<name>.svg`` (English) and ``<name>.zh_CN.svg`` for each diagram into ``folder``.

    Args:
        folder: the output folder (created if missing); the book's is ``notebooks/figures``.
        names: only these diagrams (default: all).

    Returns:
        The paths written, in order.

    Raises:
        ValueError: a name in ``names`` is not a diagram.
    """
    every = all_diagrams()
    chosen = list(every) if names is None else list(names)
    unknown = [n for n in chosen if n not in every]
    if unknown:
        raise ValueError(f"names={unknown!r} are not diagrams; allowed: {', '.join(every)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in chosen:
        for lang in LANGS:
            path = folder / (f"{name}.svg" if lang == "en" else f"{name}.{lang}.svg")
            path.write_text(every[name](lang), encoding="utf-8")
            written.append(path)
    return written

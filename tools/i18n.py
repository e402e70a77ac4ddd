"""The 简体中文 edition's message catalogs: extract, update, check and measure them.

    python tools/i18n.py extract            # English messages -> _build/gettext/**/*.pot
    python tools/i18n.py update             # extract, then sphinx-intl update locale/zh_CN
    python tools/i18n.py check [PO ...]     # every translation keeps the English markup
    python tools/i18n.py coverage           # translated share, headings and overall

``extract`` runs Sphinx's gettext builder (into ``_build/i18n/_build/gettext``) through Jupyter Book over the same sources as the web
book (``book/*.md`` and the notebooks' markdown, plus the figure alt texts and calculator labels
that ``book/_ext/ldf_i18n.py`` adds); ``update`` keeps ``locale/zh_CN/LC_MESSAGES/*.po`` in step
with it (sphinx-intl marks changed English text fuzzy and adds new messages empty).

``check`` compares each translated message with its English one: the same roles (``{term}``,
``{cite}``, ``{doc}``, ...; Sphinx fails a ``-W`` build when the count of references differs), the
same citation keys, the same formulas, inline code and link targets, the same bold and italic
spans (as CommonMark renders them), and every number of the English text present in the translation.  ``coverage`` counts a message translated when its ``msgstr`` is
not empty and not fuzzy; headings are the messages of section titles (``#`` lines of the sources).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from babel.messages.pofile import read_po
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
LANG = "zh_CN"
LOCALE = ROOT / "locale" / LANG / "LC_MESSAGES"
# The gettext builder needs doctrees of its own (the html build's are incompatible with it).
WORK = ROOT / "_build" / "i18n"
POT_DIR = WORK / "_build" / "gettext"
HEADINGS_MIN = 1.0     # every heading translated
OVERALL_MIN = 0.95     # an English edit shows as a drop in coverage, not a red CI

_ROLE = re.compile(r"\{(\w[\w:-]*)\}`([^`]*)`")
_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\s)[^$\n]+?(?<![\s\\])\$", re.S)
_CODE = re.compile(r"(?<![{}\w])`([^`]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MD = MarkdownIt("commonmark")
_NUM = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


@dataclass
class Problem:
    path: str
    msgid: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}\n    msgid: {self.msgid[:160]}"


def _without_roles(text: str) -> str:
    return _ROLE.sub(" ", text)


def markup(text: str) -> dict[str, Counter]:
    """The parts of a message a translation must keep: roles by name, cite keys, formulas,
    inline code and link targets (each as a multiset)."""
    roles = Counter(m.group(1) for m in _ROLE.finditer(text))
    cites = Counter(k.strip() for m in _ROLE.finditer(text) if m.group(1).startswith("cite")
                    for k in m.group(2).split(","))
    rest = _without_roles(text)
    maths = Counter(_MATH.findall(rest))
    code = Counter(_CODE.findall(_MATH.sub(" ", rest)))
    links = Counter(_LINK.findall(rest))
    return {"roles": roles, "cite keys": cites, "formulas": maths, "inline code": code, "links": links}


def numbers(text: str) -> Counter:
    """Numbers written in the prose (not inside formulas, code, roles or links)."""
    rest = _LINK.sub(" ", _CODE.sub(" ", _MATH.sub(" ", _without_roles(text))))
    return Counter(n.replace(",", "") for n in _NUM.findall(rest))


def emphasis(text: str) -> Counter:
    """Bold and italic spans as CommonMark renders them.  A ``**`` closing after full-width
    punctuation and before a CJK character does not close (CommonMark's flanking rules), so
    ``**本章回答：**一个`` shows its asterisks: write ``**本章回答**：一个``."""
    out = _MD.renderInline(_MATH.sub("M", text))
    return Counter(strong=out.count("<strong>"), em=out.count("<em>"))


def check_message(msgid: str, msgstr: str) -> list[str]:
    """What a translation lost or changed of its English message (empty when it keeps all)."""
    out = []
    if re.match(r"\d+[.)] ", msgstr):
        out.append("starts with a list marker ('1. '): Sphinx parses the translation as a list and "
                   "drops it; write '1\\. ' (the heading still shows '1. ')")
    if emphasis(msgid) != emphasis(msgstr):
        out.append(f"bold/italic differ (English {dict(emphasis(msgid))}, translation "
                   f"{dict(emphasis(msgstr))}): a ** or * that does not close renders as asterisks")
    a, b = markup(msgid), markup(msgstr)
    for kind in a:
        if a[kind] != b[kind]:
            missing, extra = a[kind] - b[kind], b[kind] - a[kind]
            out.append(f"{kind} differ: missing {dict(missing)} extra {dict(extra)}")
    missing = numbers(msgid) - numbers(msgstr)
    if missing:
        out.append(f"numbers missing from the translation: {sorted(missing)}")
    return out


def catalogs(locale: Path = LOCALE) -> list[Path]:
    return sorted(locale.rglob("*.po"))


def _read(path: Path):
    with open(path, "rb") as f:
        return read_po(f)


def check(paths: list[Path]) -> list[Problem]:
    problems = []
    for path in paths:
        for msg in _read(path):
            if not msg.id or not msg.string or msg.fuzzy:
                continue
            for what in check_message(msg.id, msg.string):
                problems.append(Problem(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                                        msg.id, what))
    return problems


def headings(sources: list[Path] | None = None) -> set[str]:
    """Section titles of the English sources (markdown ``#`` lines of book/*.md and of the
    notebooks' markdown cells), as the messages Sphinx extracts for them."""
    if sources is None:
        sources = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
    titles = set()
    for src in sources:
        if src.suffix == ".ipynb":
            nb = json.loads(src.read_text())
            text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        else:
            text = src.read_text()
        fence = False
        for line in text.splitlines():
            if line.lstrip().startswith(("```", "~~~", ":::")):
                fence = not fence if line.strip() in ("```", "~~~", ":::") or not fence else fence
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m and not fence:
                titles.add(m.group(1).strip())
    return titles


@dataclass
class Coverage:
    total: int
    translated: int
    heading_total: int
    heading_translated: int
    untranslated: list[tuple[str, str]]

    @property
    def overall(self) -> float:
        return self.translated / self.total if self.total else 1.0

    @property
    def headings(self) -> float:
        return self.heading_translated / self.heading_total if self.heading_total else 1.0


def coverage(pot_dir: Path = POT_DIR, locale: Path = LOCALE) -> Coverage:
    """Share of the English messages (the ``.pot`` files of ``extract``) that the ``.po`` files
    translate (non-empty, not fuzzy); a ``.pot`` without its ``.po`` counts as untranslated."""
    titles = headings()
    total = done = h_total = h_done = 0
    missing = []
    for pot in sorted(pot_dir.rglob("*.pot")):
        rel = pot.relative_to(pot_dir).with_suffix(".po")
        po = locale / rel
        have = {}
        if po.exists():
            have = {m.id: m for m in _read(po) if m.id}
        for msg in _read(pot):
            if not msg.id:
                continue
            t = have.get(msg.id)
            ok = bool(t is not None and t.string and not t.fuzzy)
            is_heading = msg.id in titles
            total += 1
            done += ok
            h_total += is_heading
            h_done += ok and is_heading
            if not ok:
                missing.append((str(rel), msg.id))
    return Coverage(total, done, h_total, h_done, missing)


def extract(work: Path = WORK) -> Path:
    """Run the gettext builder (output under ``work``); returns the folder of the ``.pot`` files.

    Raises:
        subprocess.CalledProcessError: the build failed or warned (its output is printed).
    """
    jb = Path(sys.executable).with_name("jupyter-book")
    r = subprocess.run([str(jb), "build", str(ROOT), "--all", "--builder", "custom", "--custom-builder",
                        "gettext", "--path-output", str(work), "-W", "--keep-going"],
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stdout[-4000:], r.stderr[-4000:], file=sys.stderr)
        r.check_returncode()
    return work / "_build" / "gettext"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("extract")
    sub.add_parser("update")
    c = sub.add_parser("check")
    c.add_argument("po", nargs="*", type=Path)
    sub.add_parser("coverage")
    args = ap.parse_args(argv)
    if args.cmd in ("extract", "update"):
        pots = extract()
        print(f"messages: {pots}")
        if args.cmd == "update":
            # locale/zh_CN/LC_MESSAGES/sphinx.po is kept by hand: it holds the themes' interface
            # strings, which the gettext builder does not extract, so updating it from sphinx.pot
            # would turn them obsolete and the Chinese pages' buttons back into English.
            (pots / "sphinx.pot").unlink(missing_ok=True)
            intl = Path(sys.executable).with_name("sphinx-intl")
            subprocess.run([str(intl), "update", "-p", str(pots), "-l", LANG, "-d", str(ROOT / "locale")],
                           check=True)
        return 0
    if args.cmd == "check":
        problems = check([p.resolve() for p in args.po] or catalogs())
        for p in problems:
            print(p)
        print(f"{len(problems)} problem(s)")
        return 1 if problems else 0
    cov = coverage(extract())
    print(f"translated: {cov.translated}/{cov.total} messages ({cov.overall:.1%}); "
          f"headings {cov.heading_translated}/{cov.heading_total} ({cov.headings:.1%})")
    for rel, msgid in cov.untranslated[:40]:
        print(f"  untranslated in {rel}: {msgid[:100]}")
    return 0 if cov.headings >= HEADINGS_MIN and cov.overall >= OVERALL_MIN else 1


if __name__ == "__main__":
    sys.exit(main())

"""Write the book's diagrams (llm_dataflow.diagrams) to notebooks/figures/, both editions.

    .venv/bin/python tools/diagrams.py            # every diagram
    .venv/bin/python tools/diagrams.py NAME ...   # only these

Each diagram NAME gives notebooks/figures/NAME.svg (English) and NAME.zh_CN.svg (简体中文, which
Sphinx's figure_language_filename picks for the Chinese edition). tests/test_diagrams.py fails
when a committed file differs from what the code draws: rerun this after changing a diagram or a
number it shows.
"""
import sys
from pathlib import Path

from llm_dataflow.diagrams import write_diagrams

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    for p in write_diagrams(ROOT / "notebooks" / "figures", sys.argv[1:] or None):
        print(p.relative_to(ROOT))

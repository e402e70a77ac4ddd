#!/usr/bin/env python
"""Graded assignments: generate the notebooks (the book's version or a class's own), grade a
folder of submissions, check the keys, export scores (Canvas, Moodle) and Gradescope autograders.

The commands and their options: ``python tools/grade.py --help`` and ``tools/grading/cli.py``;
how grading works and what it protects: ``assignments/README.md``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grading.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

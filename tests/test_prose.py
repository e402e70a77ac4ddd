"""Every chapter reads as the book promises (issue 48): at most 22 words per sentence on average
and at most 2 % of sentences over 50 words, in all of its markdown, folded boxes included, as
``tools/prose_stats.py`` counts them (its docstring gives the method); and the measure itself
splits sentences as a reader would."""
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("prose_stats", ROOT / "tools" / "prose_stats.py")
prose_stats = importlib.util.module_from_spec(_spec)
sys.modules["prose_stats"] = prose_stats      # its dataclass looks its module up
_spec.loader.exec_module(prose_stats)


@pytest.mark.parametrize("path", prose_stats.CHAPTERS, ids=lambda p: p.stem[:2])
def test_chapter_prose_targets(path):
    s = prose_stats.notebook_stats(path)
    assert len(s.sentences) > 50, path.name
    assert s.mean <= prose_stats.MAX_MEAN_WORDS, f"{path.name}: {s.mean:.1f} words per sentence"
    assert s.long_share <= prose_stats.MAX_LONG_SHARE, \
        f"{path.name}: {s.long_share:.1%} of sentences over {prose_stats.LONG} words: {s.long()[:3]}"


def test_the_measure_splits_as_a_reader_would():
    md = ("# A heading is not prose\n\nOne claim, e.g. this one, ends here. A second claim costs 3.35 TB/s "
          "of `ldf.hardware()` and $Q/\\beta$ time.\n\n- a list item without a stop\n- another\n\n"
          "```python\nx = 1. + 2.  # code is not prose\n```\n\n| a | table |\n|---|---|\n\n"
          ":::{dropdown} Deeper: a box\nA folded sentence counts too.\n:::\n")
    blocks = prose_stats._blocks(md)
    sentences = [s for b in blocks for s in prose_stats._sentences(b)]
    assert sentences == ["One claim, e.g. this one, ends here.",
                         "A second claim costs 3.35 TB/s of CODE and MATH time.",
                         "a list item without a stop", "another", "A folded sentence counts too."]

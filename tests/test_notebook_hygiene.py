"""Every chapter notebook: hosted-kernel install cell first, alt text on every figure."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_notebook_hygiene():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "notebook_hygiene.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_chapter_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"file: notebooks/{nb.stem}\n" in toc, f"{nb.name} is not in _toc.yml"

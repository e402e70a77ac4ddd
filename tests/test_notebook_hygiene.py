"""Every chapter notebook: hosted-kernel install cell first, alt text on every figure."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_notebook_hygiene():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "notebook_hygiene.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

"""The README's quick start prints what the README says it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_quick_start_prints_what_the_readme_shows():
    text = README.read_text().split("## Quick start", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    shown = text.split("prints\n\n```text\n", 1)[1].split("```", 1)[0]
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=README.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == shown.strip()

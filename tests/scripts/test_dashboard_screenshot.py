"""scripts/dashboard_screenshot.py end to end: a real daemon, the scripted job, headless
Chromium; the PNG is written, nothing is left in the temporary directory, and the chart's line
it prints is the one docs/daemon.md quotes. The job is the same every run, so its numbers are
too, but for a few dozen tokens (the job's id and the temporary directory's name are in its
prompts): when the context engine changes them more, run the script again and update
docs/dashboard.png, README.md and docs/daemon.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gliding.tools.sandbox import bwrap_problem

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dashboard_screenshot.py"
BROWSER = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not os.access(p, os.X_OK)]
PROBLEM = bwrap_problem()

pytestmark = [
    pytest.mark.heavy,  # a daemon, a whole job and a browser, in subprocesses
    pytest.mark.timeout(300),
    pytest.mark.skipif(PROBLEM is not None, reason=f"bubblewrap cannot run here ({PROBLEM})"),
    pytest.mark.skipif(bool(BROWSER) and os.environ.get("CI") != "true",
                       reason=f"{', '.join(BROWSER)} missing: scripts/setup.sh installs them"),
]


LINE = re.compile(r"(\d+) call\(s\): ([\d,]+) prompt tokens built vs ([\d,]+) naive "
                  r"\((\d+)% fewer\); [\d,]+ cached \(simulated\); (\d+) compaction\(s\)")


def numbers(text: str) -> tuple[int, ...]:
    found = LINE.search(" ".join(text.split()))
    assert found, text
    return tuple(int(n.replace(",", "")) for n in found.groups())


def test_the_screenshot_is_made_and_the_docs_quote_its_numbers(tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    # a short TMPDIR of its own: Chromium's sockets live there, and their paths are short
    with tempfile.TemporaryDirectory(prefix="gds-") as temp:
        made = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=tmp_path,
                              env=os.environ | {"TMPDIR": temp}, capture_output=True,
                              text=True, timeout=280, check=False)
        left = sorted(p.name for p in Path(temp).iterdir())
    assert made.returncode == 0, made.stderr[-4000:]
    assert left == []  # its project, the daemon's data, Chromium's profile: all gone
    assert out.read_bytes().startswith(b"\x89PNG") and out.stat().st_size < 400_000
    calls, built, naive, fewer, compactions = numbers(made.stdout)
    assert built < naive / 2 and compactions >= 1
    quoted = numbers((ROOT / "docs" / "daemon.md").read_text(encoding="utf-8"))
    why = f"docs/daemon.md quotes {quoted}, the script made {made.stdout}"
    assert (quoted[0], quoted[4]) == (calls, compactions), why
    assert abs(quoted[1] - built) <= built // 100 and abs(quoted[2] - naive) <= naive // 100, why
    assert abs(quoted[3] - fewer) <= 1, why

"""A reader that goes away (``gliding jobs | head -1``) ends the command quietly with the
status a shell gives a command SIGPIPE ended, not with an error about the job."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gliding.memory.archive.store import Archive
from tests.cli.cli_support import clean_env, gliding_script


def test_a_closed_stdout_ends_the_listing_quietly(tmp_path: Path) -> None:
    for n in range(300):  # enough lines to fill the pipe once its reader is gone
        with Archive.open(tmp_path / "data", f"20260101-000000-{n:06x}") as archive:
            archive.set_meta("goal", "a goal long enough to take some room " * 3)
            archive.set_meta("status", "success")
    proc = subprocess.Popen([str(gliding_script()), "jobs", "--data-dir", "data"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=clean_env({}))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141, err
    assert "error" not in err, err

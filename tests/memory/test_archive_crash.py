"""Crash safety of the L0 archive: a writer killed with SIGKILL never loses a committed entry.

A child process appends entries of 1 B to 1 MB in a tight loop and prints each IRI once ``put``
has returned. The test kills it at three different moments on the same archive (the child
resumes appending after every reopen) and checks after each kill that the file verifies clean and
that every reported entry reads back byte for byte.
"""

from __future__ import annotations

import inspect
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import gliding
from gliding.core.iri import record_iri
from gliding.memory.archive.store import Archive

JOB = "crash-job"
REPO_ROOT = Path(gliding.__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def expected_content(i: int) -> bytes:
    """Entry ``i``: log-uniform size from 1 B to 1 MB, bytes fixed by ``i`` alone."""
    rng = random.Random(i)
    size = max(1, min(1_000_000, int(10 ** rng.uniform(0, 6))))
    return rng.randbytes(size)


CHILD = "import random\n\n" + inspect.getsource(expected_content) + textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from gliding.core.iri import record_iri
    from gliding.memory.archive.store import Archive

    data_dir, job, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    archive = Archive.open(data_dir, job)
    i = start
    while True:
        iri = record_iri(job, "chunk", str(i))
        archive.put(iri, expected_content(i), kind="chunk", media_type="application/octet-stream")
        print(i, iri, flush=True)
        i += 1
    """
)


def run_and_kill(
    script: Path, data_dir: Path, start: int, *, commits: int, delay_s: float
) -> list[int]:
    """Start the writer at index ``start``, SIGKILL it ``delay_s`` after ``commits`` commits,
    and return every index it reported as committed."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(data_dir), JOB, str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)
        lines.put("")  # end of output

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    reported: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while len(reported) < commits:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if not line:
                child.wait(timeout=10)
                assert child.stderr is not None
                pytest.fail(f"writer exited early ({child.returncode}): {child.stderr.read()}")
            index, iri = line.split()
            assert iri == str(record_iri(JOB, "chunk", index))
            reported.append(int(index))
        time.sleep(delay_s)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    reader.join(timeout=30)
    child.stdout.close()  # the pump read it to the end; unclosed, it is a ResourceWarning
    while True:  # lines printed before the kill are still in the pipe
        line = lines.get_nowait()
        if not line:
            break
        reported.append(int(line.split()[0]))
    assert child.returncode == -signal.SIGKILL
    if child.stderr is not None:
        child.stderr.close()
    return reported


def test_sigkill_never_loses_a_committed_entry(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    data_dir = tmp_path / "data"
    committed: list[int] = []
    # kill right after a commit, while the next big blob is written, and a while later
    for round_no, delay_s in enumerate((0.0, 0.013, 0.2)):
        start = committed[-1] + 1 if committed else 0
        reported = run_and_kill(script, data_dir, start, commits=50, delay_s=delay_s)
        assert reported == list(range(start, start + len(reported)))
        assert len(reported) >= 50
        committed += reported

        with Archive.open(data_dir, JOB, create=False) as archive:
            assert archive.verify() == [], f"round {round_no}"
            for i in committed:
                assert archive.get(record_iri(JOB, "chunk", str(i))).content == (
                    expected_content(i)
                ), f"entry {i} after round {round_no}"
            stored = [item.iri for item in archive.list("chunk")]
        # at most the one entry whose commit raced the kill is there unreported; none is missing
        expected_iris = [str(record_iri(JOB, "chunk", str(i))) for i in committed]
        assert stored[: len(committed)] == expected_iris
        assert len(stored) - len(committed) <= 1
    sizes = [len(expected_content(i)) for i in committed]
    assert min(sizes) < 100 and max(sizes) > 100_000  # the sizes really did vary

"""What an attacker's review tried against the tools: calls that never end, races that leak.

- every call ends within its own timeout and within what is left of the job's wall budget,
  even when the work is a catastrophic regex, a huge or deep tree, a FIFO or a 20 GB file;
- a symlink swapped while a file tool runs never leaks a read or lands a write outside, and a
  hard link to a file outside is not read;
- a NUL byte in any path or pattern is a clear tool error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.agents.loop import AgentEnv, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings, ToolSettings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.errors import ConfinementError, NotFoundError, ToolError
from gliding.testing import ScriptedLLM, call
from gliding.testing.archive import InMemoryArchive
from gliding.tools import files, search
from gliding.tools.base import (
    Tool,
    ToolContext,
    ToolGroupManager,
    ToolOutcome,
    Toolset,
    builtin_groups,
    schema,
)
from gliding.tools.readback import MemoryGroup
from gliding.tools.shell import BASH

SLOW_REGEX = "(a|aa)+$"  # exponential backtracking in re and in the regex module alike
SLOW_LINE = "a" * 60 + "b"


def _call(toolset: Toolset, name: str, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    async def main() -> ToolOutcome:
        return await toolset.call(name, args, ctx)

    return anyio.run(main)


@pytest.fixture
def tools() -> Toolset:
    return ToolGroupManager(builtin_groups()).toolset(["read", "write"])


# -- 1. every call is bounded ------------------------------------------------------------------


async def _sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    await anyio.sleep(30)
    return "woke up"


def test_a_call_ends_within_its_own_timeout(tmp_path: Path) -> None:
    slow = Toolset((Tool("slow", "Sleeps.", schema(), _sleep, timeout_s=0.2),))
    outcome = _call(slow, "slow", {}, ToolContext(tmp_path, ToolSettings()))
    assert not outcome.ok  # ended by its 0.2 s timeout: the 30 s sleep would say "woke up"
    assert outcome.output.startswith("error: slow timed out after 0.2s")
    assert "hint:" in outcome.output


def test_a_call_ends_within_what_is_left_of_the_wall_budget(tmp_path: Path) -> None:
    slow = Toolset((Tool("slow", "Sleeps.", schema(), _sleep),))  # no timeout of its own
    ctx = ToolContext(tmp_path, ToolSettings(), deadline=time.monotonic() + 0.2)
    outcome = _call(slow, "slow", {}, ctx)
    assert not outcome.ok
    assert "timed out" in outcome.output and "wall time budget" in outcome.output
    spent = ToolContext(tmp_path, ToolSettings(), deadline=time.monotonic() - 1)
    outcome = _call(slow, "slow", {}, spent)
    assert not outcome.ok and "not run" in outcome.output and "wall time budget" in outcome.output


def test_bash_is_stopped_at_the_end_of_the_wall_budget(tmp_path: Path) -> None:
    shell = Toolset((BASH,))
    ctx = ToolContext(tmp_path, ToolSettings(sandbox="off"), deadline=time.monotonic() + 0.5)
    outcome = _call(shell, "bash", {"command": "sleep 20"}, ctx)
    assert not outcome.ok and "timed out" in outcome.output  # stopped: the sleep did not end it


def test_the_loop_gives_each_call_what_is_left_of_the_wall_budget(tmp_path: Path) -> None:
    seen: list[float | None] = []

    async def probe(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(ctx.deadline)
        return "probed"

    settings = Settings()
    llm = ScriptedLLM([call("probe"), call("finish", summary="done")])
    env = AgentEnv(
        job="job1", role=load_role("DA"), llm=llm,
        toolset=Toolset((Tool("probe", "Probe.", schema(), probe),)),
        tool_ctx=ToolContext(tmp_path, settings.tools), archive=InMemoryArchive("job1"),
        budget=BudgetTracker(Limits(turns={}, wall_time_s=100.0), started_at=0.0),
        bus=InProcessBus(), now=lambda: 40.0, max_turns=3, context=settings.context,
        counter=TokenCounter(settings.context.tokenizer),
    )
    before = time.monotonic()
    result = anyio.run(run_agent, env, "Goal: probe")
    assert result.status == "finished"
    assert len(seen) == 1 and seen[0] is not None
    assert before + 59 <= seen[0] <= time.monotonic() + 60  # 100 s budget, 40 s spent


def test_grep_with_a_catastrophic_regex_ends_with_a_clear_error(
    tmp_path: Path, tools: Toolset
) -> None:
    (tmp_path / "a.txt").write_text("fine\n" + SLOW_LINE + "\n")
    ctx = ToolContext(tmp_path, ToolSettings())
    outcome = _call(tools, "grep", {"pattern": SLOW_REGEX}, ctx)
    assert not outcome.ok
    # the backtracking bound stopped it (run to the end, it would not end within pytest's timeout)
    assert "line 2 of a.txt" in outcome.output and "backtrack" in outcome.output
    assert "hint:" in outcome.output


def test_grep_stops_at_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(TimeoutError):
        search.grep(tmp_path, "x", max_matches=5, deadline=time.monotonic() - 1)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text

    async def read_text(self, iri: str) -> str:
        return self.text


def test_grep_result_with_a_catastrophic_regex_ends_with_a_clear_error(tmp_path: Path) -> None:
    group = MemoryGroup(_Reader("ok\n" + SLOW_LINE + "\n"))
    toolset = Toolset(group.tools)
    ctx = ToolContext(tmp_path, ToolSettings())
    args = {"iri": "gliding://job/j/result/x", "pattern": SLOW_REGEX}
    outcome = _call(toolset, "grep_result", args, ctx)
    assert not outcome.ok and "line 2" in outcome.output and "backtrack" in outcome.output


def test_read_back_answers_keep_their_documented_bounds(tmp_path: Path) -> None:
    group = MemoryGroup(_Reader("".join(f"match {i} " + "x" * 500 + "\n" for i in range(500))))
    toolset = Toolset(group.tools)
    ctx = ToolContext(tmp_path, ToolSettings())
    iri = "gliding://job/j/result/x"
    page = _call(toolset, "read_result", {"iri": iri, "limit": 10**9}, ctx)
    assert page.ok and len(page.output) <= 4000 + 100  # a page and its one-line notice
    hits = _call(toolset, "grep_result", {"iri": iri, "pattern": "match"}, ctx)
    assert hits.ok and len(hits.output) <= 4000
    assert hits.output.endswith("more matches; narrow the pattern]")
    nothing = _call(toolset, "grep_result", {"iri": iri, "pattern": "q" * 10_000}, ctx)
    assert nothing.ok and len(nothing.output) <= 4000
    missing = _call(Toolset(MemoryGroup(_Missing()).tools), "read_result",
                    {"iri": "gliding://job/j/result/" + "x" * 10_000}, ctx)
    assert not missing.ok and "no item" in missing.output and len(missing.output) <= 4000


class _Missing:
    async def read_text(self, iri: str) -> str:
        raise NotFoundError(f"no item {iri}", hint=f"is {iri} right?")


def _deep_tree(root: Path, depth: int) -> Path:
    here = root
    for _ in range(depth):
        here = here / "d"
    here.mkdir(parents=True)
    (here / "leaf.txt").write_text("deep\n")
    return here


def test_glob_of_a_deep_tree_with_a_pathological_pattern_ends(tmp_path: Path) -> None:
    _deep_tree(tmp_path, 200)
    (tmp_path / ("a" * 200)).write_text("")
    # that it ends at all is what is tested: a hang is pytest's timeout, no speed is asserted
    for pattern in ["**/*/**/*/**/*/**/*/**/x", "*a*a*a*a*a*a*a*a*a*a*a*a*b"]:
        out = _glob_or_error(tmp_path, pattern)
        assert "no files match" in out or "too complex" in out or "stopped" in out


def _glob_or_error(workspace: Path, pattern: str) -> str:
    try:
        return search.glob(workspace, pattern)
    except ToolError as exc:
        return str(exc)


def test_walks_stop_at_their_depth_and_entry_caps_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deep_tree(tmp_path, search.MAX_WALK_DEPTH + 5)
    out = search.glob(tmp_path, "**/leaf.txt")
    assert "no files match" in out and f"deeper than {search.MAX_WALK_DEPTH}" in out
    assert f"deeper than {search.MAX_WALK_DEPTH}" in search.grep(tmp_path, "deep", max_matches=5)
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(50):
        (wide / f"f{i:02d}.txt").write_text("needle\n")
    monkeypatch.setattr(search, "MAX_WALK_ENTRIES", 20)
    out = search.glob(tmp_path, "wide/*.txt")
    assert "stopped after 20 entries" in out
    assert "stopped after 20 entries" in search.grep(tmp_path, "needle", "wide", max_matches=100)


def test_glob_stops_at_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(TimeoutError):
        search.glob(tmp_path, "**/*", deadline=time.monotonic() - 1)


def test_file_tools_refuse_a_fifo_at_once(tmp_path: Path, tools: Toolset) -> None:
    os.mkfifo(tmp_path / "pipe")
    ctx = ToolContext(tmp_path, ToolSettings())
    for name, args in [("read_file", {"path": "pipe"}),
                       ("edit_file", {"path": "pipe", "old": "a", "new": "b"})]:
        outcome = _call(tools, name, args, ctx)  # an open of the FIFO would block: no writer
        assert not outcome.ok, name
        assert "pipe is a FIFO, not a regular file" in outcome.output
    assert search.grep(tmp_path, "x", max_matches=5).startswith("no matches")


def test_read_file_pages_a_20_gb_sparse_file_without_reading_it_whole(tmp_path: Path) -> None:
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as handle:
        handle.write(b"first line\nsecond line\n")
        handle.truncate(20 << 30)
    out = files.read_file(tmp_path, "huge.bin", limit=1)
    # its lines were not counted (that would read all 20 GB) ...
    assert out.startswith("huge.bin lines 1-1 (a file of 21474836480 bytes: too large to count")
    assert "first line" in out and "call read_file with offset=2" in out
    second = files.read_file(tmp_path, "huge.bin", offset=2, page_chars=4096)
    # ... and a page stops at its size, not at the end of the file
    assert "second line" in second and "page size reached" in second
    with pytest.raises(ToolError, match="too large for edit_file"):
        files.edit_file(tmp_path, "huge.bin", "first", "1st")


def test_read_file_stops_at_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    with pytest.raises(TimeoutError):
        files.read_file(tmp_path, "f.txt", deadline=time.monotonic() - 1)


# -- 2. no race leaks --------------------------------------------------------------------------

TRIES = 300


@pytest.fixture
def arena(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with an inside directory and file, and an outside one holding a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET TEXT\n")
    (outside / "only_outside.txt").write_text("")
    ws = tmp_path / "ws"
    (ws / "in").mkdir(parents=True)
    (ws / "in" / "f.txt").write_text("inside TEXT\n")
    return ws, outside


_SWAPPER = """
import ctypes, os, sys
name, other = (os.fsencode(a) for a in sys.argv[1:3])
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
AT_FDCWD, RENAME_EXCHANGE = -100, 2
while True:
    if renameat2(AT_FDCWD, name, AT_FDCWD, other, RENAME_EXCHANGE) != 0:
        sys.exit(ctypes.get_errno())
"""


@contextmanager
def _swapping(name: Path, outside: Path) -> Iterator[None]:
    """Another process that atomically exchanges the real file or directory ``name`` with a
    symlink to ``outside`` and back (renameat2 RENAME_EXCHANGE: ``name`` never goes missing),
    as fast as it can (a thread would mostly wait for the GIL): a path checked while ``name``
    is real and then opened is read or written outside."""
    other = name.with_name(name.name + ".swap")
    other.symlink_to(outside)
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(name), str(other)])
    try:
        time.sleep(0.05)  # let it get going
        assert swapper.poll() is None, "the swapper could not start (renameat2 missing?)"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        if name.is_symlink():  # stopped mid-swap: put the real entry back
            os.replace(name, name.with_name(name.name + ".link"))
            os.rename(other, name)
            other = name.with_name(name.name + ".link")
        other.unlink()


def _tries(fn: Callable[[], str]) -> list[str]:
    """``fn``'s answers over TRIES calls; a refusal is fine, any other exception is not."""
    out = []
    for _ in range(TRIES):
        try:
            out.append(fn())
        except ToolError as exc:  # a refusal (or a path that changed underfoot) is fine
            out.append(f"error: {exc}")
        except OSError as exc:
            out.append(f"crash: {exc!r}")
    return out


def _crashes(answers: list[str]) -> list[str]:
    return [a for a in answers if a.startswith("crash:")]


def test_a_swapped_directory_symlink_leaks_no_read(arena: tuple[Path, Path]) -> None:
    ws, outside = arena
    with _swapping(ws / "in", outside):
        read = _tries(lambda: files.read_file(ws, "in/f.txt"))
        listed = _tries(lambda: files.list_dir(ws, "in"))
        grepped = _tries(lambda: search.grep(ws, "TEXT", "in", max_matches=5))
    assert not [r for r in read + grepped if "SECRET" in r]
    assert any("inside TEXT" in r for r in read)  # the swap was really racing
    assert not [r for r in listed if "only_outside" in r]
    assert not _crashes(read + listed + grepped)


def test_a_swapped_file_symlink_leaks_no_read(arena: tuple[Path, Path]) -> None:
    ws, outside = arena
    with _swapping(ws / "in" / "f.txt", outside / "f.txt"):
        read = _tries(lambda: files.read_file(ws, "in/f.txt"))
        grepped = _tries(lambda: search.grep(ws, "TEXT", max_matches=5))
    assert not [r for r in read + grepped if "SECRET" in r]
    assert any("inside TEXT" in r for r in read)
    assert not _crashes(read + grepped)


def test_a_swapped_symlink_lands_no_write_outside(arena: tuple[Path, Path]) -> None:
    ws, outside = arena
    secret = outside / "f.txt"
    inode = secret.stat().st_ino
    with _swapping(ws / "in", outside):
        wrote = _tries(lambda: files.write_file(ws, "in/new.txt", "pwned"))
        edited = _tries(lambda: files.edit_file(ws, "in/f.txt", "TEXT", "TEXT"))
    with _swapping(ws / "in" / "f.txt", secret):
        wrote += _tries(lambda: files.write_file(ws, "in/f.txt", "pwned TEXT\n"))
        edited += _tries(lambda: files.edit_file(ws, "in/f.txt", "TEXT", "TEXT"))
    assert sorted(os.listdir(outside)) == ["f.txt", "only_outside.txt"]  # nothing new, no temp
    assert secret.read_text() == "SECRET TEXT\n" and secret.stat().st_ino == inode
    assert not _crashes(wrote + edited)
    assert any(w.startswith("wrote") for w in wrote)
    assert any(e.startswith("replaced") for e in edited)
    assert (ws / "in" / "new.txt").read_text() == "pwned"


def test_a_hard_link_to_a_file_outside_is_not_read(arena: tuple[Path, Path]) -> None:
    ws, outside = arena
    os.link(outside / "f.txt", ws / "hard.txt")
    with pytest.raises(ConfinementError, match="hard.txt has 2 hard links") as info:
        files.read_file(ws, "hard.txt")
    assert "hint:" in str(info.value)
    with pytest.raises(ConfinementError, match="hard links"):
        files.edit_file(ws, "hard.txt", "SECRET", "x")
    assert search.grep(ws, "SECRET", max_matches=5) == (
        "no matches for 'SECRET' in . (1 files with several hard links skipped: another link "
        "may lie outside the workspace)")
    files.write_file(ws, "hard.txt", "mine")  # replacing the name leaves the outside file be
    assert (outside / "f.txt").read_text() == "SECRET TEXT\n"
    assert files.read_file(ws, "hard.txt") == "hard.txt lines 1-1 of 1\nmine"


# -- 3. NUL bytes ------------------------------------------------------------------------------

NUL_CALLS = [
    ("read_file", {"path": "a\x00b"}),
    ("write_file", {"path": "a\x00b", "content": "x"}),
    ("edit_file", {"path": "a\x00b", "old": "a", "new": "b"}),
    ("list_dir", {"path": "a\x00b"}),
    ("grep", {"pattern": "x", "path": "a\x00b"}),
    ("grep", {"pattern": "x", "glob": "*\x00.py"}),
    ("glob", {"pattern": "a\x00*"}),
    ("glob", {"pattern": "a\x00b"}),
]


@pytest.mark.parametrize(("name", "args"), NUL_CALLS)
def test_a_nul_byte_in_a_path_is_a_clear_error(
    tmp_path: Path, tools: Toolset, name: str, args: dict[str, Any]
) -> None:
    outcome = _call(tools, name, args, ToolContext(tmp_path, ToolSettings()))
    assert not outcome.ok
    assert "contains a NUL byte" in outcome.output and "hint:" in outcome.output
    assert "ValueError" not in outcome.output

"""Confinement: resolve_in_workspace, locate and every path-taking tool refuse paths that leave."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import ToolSettings
from gliding.errors import ConfinementError, ToolError
from gliding.tools import files, search
from gliding.tools.base import ToolContext, ToolGroupManager, builtin_groups
from gliding.tools.workspace import locate, open_regular, resolve_in_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace next to an 'outside' directory, with symlinks that point out of it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET outside\n")
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "b.txt").write_text("inside\n")
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    (ws / "linkdir").symlink_to(outside, target_is_directory=True)
    (ws / "inlink.txt").symlink_to(ws / "b.txt")
    return ws


ESCAPES = [
    "../outside/secret.txt",
    "/etc/passwd",
    "a/../../outside/secret.txt",
    "link.txt",
    "linkdir/secret.txt",
    "linkdir",
    "linkdir/new/deeper.txt",
]


@pytest.mark.parametrize("rel", ESCAPES)
def test_resolve_refuses_escapes(ws: Path, rel: str) -> None:
    with pytest.raises(ConfinementError) as info:
        resolve_in_workspace(ws, rel)
    text = str(info.value)
    assert repr(rel) in text
    assert "workspace" in text
    assert "hint:" in text


def test_resolve_names_workspace_in_message(ws: Path) -> None:
    with pytest.raises(ConfinementError, match=str(os.path.realpath(ws))):
        resolve_in_workspace(ws, "../x")


@pytest.mark.parametrize("bad", ["a\x00b", 3, None, b"b.txt"])
def test_resolve_refuses_nul_and_non_strings(ws: Path, bad: object) -> None:
    with pytest.raises(ConfinementError):
        resolve_in_workspace(ws, bad)  # type: ignore[arg-type]


def test_resolve_allows_dotdot_that_stays_inside(ws: Path) -> None:
    assert resolve_in_workspace(ws, "a/../b.txt") == Path(os.path.realpath(ws / "b.txt"))
    assert resolve_in_workspace(ws, ".") == Path(os.path.realpath(ws))
    assert resolve_in_workspace(ws, "inlink.txt") == Path(os.path.realpath(ws / "b.txt"))
    assert resolve_in_workspace(ws, "new/dir/file.txt").parent.name == "dir"


def test_resolve_must_exist(ws: Path) -> None:
    with pytest.raises(ToolError, match="no such file: nope.txt"):
        resolve_in_workspace(ws, "nope.txt", must_exist=True)
    assert resolve_in_workspace(ws, "b.txt", must_exist=True).name == "b.txt"


@pytest.mark.parametrize("rel", ESCAPES)
def test_file_tools_refuse_escapes(ws: Path, rel: str) -> None:
    with pytest.raises(ConfinementError):
        files.read_file(ws, rel)
    with pytest.raises(ConfinementError):
        files.write_file(ws, rel, "pwned")
    with pytest.raises(ConfinementError):
        files.edit_file(ws, rel, "SECRET", "pwned")
    with pytest.raises(ConfinementError):
        files.list_dir(ws, rel)
    with pytest.raises(ConfinementError):
        search.grep(ws, "SECRET", rel, max_matches=10)


def test_outside_is_untouched_after_refused_writes(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    before = sorted(os.listdir(outside))
    for rel in ESCAPES:
        with pytest.raises(ConfinementError):
            files.write_file(ws, rel, "pwned")
    assert sorted(os.listdir(outside)) == before == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "SECRET outside\n"


GLOB_ESCAPES = [
    "../outside/*",
    "/etc/*",
    "a/../../outside/*",
    "../*/*.txt",
    "linkdir/*",
    "linkdir/**/*.txt",
    "link.txt",
]


@pytest.mark.parametrize("pattern", GLOB_ESCAPES)
def test_glob_refuses_escaping_patterns(ws: Path, pattern: str) -> None:
    with pytest.raises(ConfinementError):
        search.glob(ws, pattern)


def test_glob_and_grep_do_not_follow_links_out(ws: Path) -> None:
    listed = search.glob(ws, "**/*").splitlines()
    assert listed == ["a/", "b.txt", "inlink.txt"]
    assert search.grep(ws, "SECRET", max_matches=10).startswith("no matches")
    assert search.grep(ws, "inside", max_matches=10) == "b.txt:1:inside\ninlink.txt:1:inside"


def test_toolset_reports_confinement_to_model(ws: Path) -> None:
    toolset = ToolGroupManager(builtin_groups()).toolset(["read", "write"])
    ctx = ToolContext(ws, ToolSettings())

    async def main() -> list[tuple[bool, str]]:
        calls = [
            ("read_file", {"path": "../outside/secret.txt"}),
            ("write_file", {"path": "linkdir/x.txt", "content": "x"}),
            ("edit_file", {"path": "link.txt", "old": "SECRET", "new": "x"}),
            ("list_dir", {"path": "/etc"}),
            ("grep", {"pattern": "root", "path": "/etc"}),
            ("glob", {"pattern": "/etc/*"}),
        ]
        out = []
        for name, args in calls:
            outcome = await toolset.call(name, args, ctx)
            out.append((outcome.ok, outcome.output))
        return out

    for ok, output in anyio.run(main):
        assert not ok
        assert output.startswith("error: ")
        assert "workspace" in output
    assert not (ws.parent / "outside" / "x.txt").exists()


def test_locate_follows_links_that_stay_inside_and_refuses_the_rest(ws: Path) -> None:
    (ws / "a" / "up").symlink_to("../b.txt")  # relative, through '..'
    with locate(ws, "inlink.txt") as found:  # absolute, inside
        assert found.real == "b.txt" and found.fd is not None and not found.is_dir
    with locate(ws, "a/up") as found:
        assert found.real == "b.txt"
    with locate(ws, "a/../a") as found:
        assert found.real == "a" and found.is_dir
    with locate(ws, ".") as found:
        assert found.real == "." and found.name == "" and found.is_dir
    for rel in ["link.txt", "linkdir/secret.txt", "a/../.."]:
        with pytest.raises(ConfinementError, match="workspace"):
            locate(ws, rel)


def test_locate_says_what_is_wrong_with_a_path(ws: Path) -> None:
    (ws / "loop").symlink_to("loop")
    with pytest.raises(ToolError, match="more than 40 symlinks"):
        locate(ws, "loop")
    with pytest.raises(ToolError, match="b.txt is not a directory"):
        locate(ws, "b.txt/x")
    with pytest.raises(ToolError, match="no such file: new/x.txt"):
        locate(ws, "new/x.txt")
    with locate(ws, "new/deeper/x.txt", make_dirs=True) as found:
        assert found.fd is None and found.st is None and found.name == "x.txt"
    assert (ws / "new" / "deeper").is_dir()


def test_a_missing_file_and_a_refused_one_say_so(ws: Path) -> None:
    with pytest.raises(ToolError, match="no such file: nope.txt"):
        open_regular(ws, "nope.txt")
    with pytest.raises(ToolError, match="a is a directory"):
        open_regular(ws, "a")
    os.mkfifo(ws / "fifo")
    with pytest.raises(ToolError, match="fifo is a FIFO, not a regular file"):
        open_regular(ws, "fifo")
    with open_regular(ws, "inlink.txt") as found:
        assert found.fd is not None and os.read(found.fd, 100) == b"inside\n"

"""read_file paging, atomic write_file, edit_file occurrence rules, list_dir."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import ToolSettings
from gliding.errors import ToolError
from gliding.tools import files
from gliding.tools.base import ToolContext, ToolGroupManager, builtin_groups


def test_read_file_pages_by_lines(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 251)))
    first = files.read_file(tmp_path, "f.txt", page_lines=200)
    lines = first.splitlines()
    assert lines[0] == "f.txt lines 1-200 of 250"
    assert lines[1] == "line 1" and lines[200] == "line 200"
    assert lines[-1] == "... 50 more lines; call read_file with offset=201"
    second = files.read_file(tmp_path, "f.txt", offset=201, page_lines=200)
    assert second.splitlines()[0] == "f.txt lines 201-250 of 250"
    assert second.splitlines()[-1] == "line 250"
    assert "more lines" not in second
    middle = files.read_file(tmp_path, "./f.txt", offset=10, limit=2)
    assert middle == "f.txt lines 10-11 of 250\nline 10\nline 11\n" + (
        "... 239 more lines; call read_file with offset=12"
    )


def test_read_file_small_and_edge_cases(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("Hello, World!")
    assert files.read_file(tmp_path, "hello.txt") == "hello.txt lines 1-1 of 1\nHello, World!"
    (tmp_path / "empty.txt").write_text("")
    assert files.read_file(tmp_path, "empty.txt") == "empty.txt is empty (0 lines)"
    with pytest.raises(ToolError, match="offset 5 is past the end of hello.txt"):
        files.read_file(tmp_path, "hello.txt", offset=5)
    with pytest.raises(ToolError, match="at least 1"):
        files.read_file(tmp_path, "hello.txt", offset=0)
    with pytest.raises(ToolError, match="no such file: missing.txt"):
        files.read_file(tmp_path, "missing.txt")
    (tmp_path / "d").mkdir()
    with pytest.raises(ToolError, match="d is a directory"):
        files.read_file(tmp_path, "d")


def test_read_file_binary_and_long_lines(tmp_path: Path) -> None:
    (tmp_path / "bin").write_bytes(b"ok\xff\xfe\x00end\n")
    assert files.read_file(tmp_path, "bin") == "bin lines 1-1 of 1\nok\ufffd\ufffd\x00end\n"
    (tmp_path / "long.txt").write_text("x" * 200_000 + "\nnext\n")
    out = files.read_file(tmp_path, "long.txt")  # a line over CHUNK characters, kept whole
    assert out == "long.txt lines 1-2 of 2\n" + "x" * 200_000 + "\nnext\n"


def test_read_file_stops_a_page_at_page_chars_and_says_where(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("a\n" + "y" * 300_000 + "\nz\n")
    out = files.read_file(tmp_path, "big.txt", page_chars=100_000)
    head, notice = out.split("\n[page size reached", 1)
    assert head == "big.txt lines 1-2 of 3\na\n" + "y" * (100_000 - 2)
    assert f"in line 2: {300_000 - 99_998 + 1} more characters" in notice
    assert notice.endswith("... 1 more line; call read_file with offset=3")


def test_read_file_counts_lines_of_a_file_without_a_final_newline(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("one\ntwo")
    assert files.read_file(tmp_path, "t.txt") == "t.txt lines 1-2 of 2\none\ntwo"
    assert files.read_file(tmp_path, "t.txt", offset=2) == "t.txt lines 2-2 of 2\ntwo"


def test_write_file_exact_bytes_parents_and_no_temp_left(tmp_path: Path) -> None:
    out = files.write_file(tmp_path, "sub/dir/héllo.txt", "Hello, Wörld!")
    assert out == "wrote 14 bytes to sub/dir/héllo.txt"
    target = tmp_path / "sub" / "dir" / "héllo.txt"
    assert target.read_bytes() == "Hello, Wörld!".encode()
    assert os.listdir(target.parent) == ["héllo.txt"]
    files.write_file(tmp_path, "sub/dir/héllo.txt", "")
    assert target.read_bytes() == b""
    with pytest.raises(ToolError, match="is a directory"):
        files.write_file(tmp_path, "sub", "x")


def test_write_file_keeps_mode_of_replaced_file(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    files.write_file(tmp_path, "run.sh", "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    files.write_file(tmp_path, "new.txt", "x")
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644


def test_write_through_inside_symlink_writes_target(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "alias.txt").symlink_to(tmp_path / "real.txt")
    files.write_file(tmp_path, "alias.txt", "new")
    assert (tmp_path / "real.txt").read_text() == "new"
    assert (tmp_path / "alias.txt").is_symlink()


def test_edit_file_occurrences(tmp_path: Path) -> None:
    f = tmp_path / "code.py"
    f.write_text("a = 1\nb = 2\nb = 2\n")
    with pytest.raises(ToolError, match="old text found 0 times in code.py"):
        files.edit_file(tmp_path, "code.py", "c = 3", "c = 4")
    assert files.edit_file(tmp_path, "code.py", "a = 1", "a = 10") == (
        "replaced 1 occurrence in code.py"
    )
    assert f.read_text() == "a = 10\nb = 2\nb = 2\n"
    with pytest.raises(ToolError, match="old text found 2 times in code.py") as info:
        files.edit_file(tmp_path, "code.py", "b = 2", "b = 3")
    assert "replace_all" in str(info.value)
    assert f.read_text() == "a = 10\nb = 2\nb = 2\n"
    assert files.edit_file(tmp_path, "code.py", "b = 2", "b = 3", replace_all=True) == (
        "replaced 2 occurrences in code.py"
    )
    assert f.read_text() == "a = 10\nb = 3\nb = 3\n"


def test_edit_file_refusals(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x\r\ny\r\n")
    with pytest.raises(ToolError, match="old must not be empty"):
        files.edit_file(tmp_path, "f.txt", "", "z")
    with pytest.raises(ToolError, match="no such file"):
        files.edit_file(tmp_path, "nope.txt", "a", "b")
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(ToolError, match="not UTF-8"):
        files.edit_file(tmp_path, "bin", "a", "b")
    files.edit_file(tmp_path, "f.txt", "x\r\n", "X\r\n")
    assert (tmp_path / "f.txt").read_bytes() == b"X\r\ny\r\n"


def test_list_dir_sorted_with_markers_and_cap(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("")
    (tmp_path / "a").mkdir()
    (tmp_path / "c").symlink_to(tmp_path / "b.txt")
    assert files.list_dir(tmp_path) == "a/\nb.txt\nc@"
    assert files.list_dir(tmp_path, "a") == "a/ is empty"
    with pytest.raises(ToolError, match="b.txt is not a directory"):
        files.list_dir(tmp_path, "b.txt")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(510):
        (many / f"f{i:04d}").write_text("")
    lines = files.list_dir(tmp_path, "many").splitlines()
    assert len(lines) == 501
    assert lines[0] == "f0000" and lines[499] == "f0499"
    assert lines[500] == "... 10 more entries not shown; use glob"


def test_file_tools_through_toolset(tmp_path: Path) -> None:
    toolset = ToolGroupManager(builtin_groups()).toolset(["read", "write"])
    ctx = ToolContext(tmp_path, ToolSettings(read_page_lines=2))

    async def main() -> list[str]:
        steps = [
            ("write_file", {"path": "hello.txt", "content": "one\ntwo\nthree\n"}),
            ("edit_file", {"path": "hello.txt", "old": "two", "new": "TWO"}),
            ("read_file", {"path": "hello.txt"}),
            ("list_dir", {}),
        ]
        outputs = []
        for name, args in steps:
            outcome = await toolset.call(name, args, ctx)
            assert outcome.ok, outcome.output
            outputs.append(outcome.output)
        return outputs

    wrote, edited, read, listed = anyio.run(main)
    assert wrote == "wrote 14 bytes to hello.txt"
    assert edited == "replaced 1 occurrence in hello.txt"
    assert read == (
        "hello.txt lines 1-2 of 3\none\nTWO\n... 1 more line; call read_file with offset=3"
    )
    assert listed == "hello.txt"

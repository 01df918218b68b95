"""glob and grep: matching rules, caps with notices, skipped files, bad regexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.errors import ToolError
from gliding.tools.search import glob, glob_regex, grep


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for rel, text in {
        "main.py": "import os\nprint('hello')\n",
        "src/pkg/mod.py": "def hello():\n    return 'Hello'\n",
        "src/pkg/data.txt": "hello data\n",
        "src/readme.md": "# Hello\n",
        ".hidden/secret.py": "hello hidden\n",
        ".git/config": "hello git\n",
    }.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/*.py", "a/b/c.py", True),
        ("**/*.py", "c.py", True),
        ("*.py", "a/c.py", False),
        ("src/*.py", "src/x.py", True),
        ("*", ".hidden", False),
        (".*", ".hidden", True),
        ("[ab].txt", "a.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("a+b.txt", "a+b.txt", True),
    ],
)
def test_glob_regex(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).fullmatch(path)) is matches


def test_a_run_of_double_stars_is_one() -> None:
    assert glob_regex("**/**/**/*.py").pattern == glob_regex("**/*.py").pattern
    assert glob_regex("a/**/**").fullmatch("a/b/c")


def test_glob_matches_sorted_relative(tree: Path) -> None:
    assert glob(tree, "**/*.py") == "main.py\nsrc/pkg/mod.py"
    assert glob(tree, "src/*") == "src/pkg/\nsrc/readme.md"
    assert glob(tree, "src/**/*.txt") == "src/pkg/data.txt"
    assert glob(tree, ".hidden/*.py") == ".hidden/secret.py"
    assert glob(tree, "main.py") == "main.py"
    assert glob(tree, "*.rs") == "no files match '*.rs'"
    with pytest.raises(ToolError, match="non-empty"):
        glob(tree, "")


def test_glob_caps_results(tmp_path: Path) -> None:
    for i in range(505):
        (tmp_path / f"f{i:04d}.txt").write_text("")
    lines = glob(tmp_path, "*.txt").splitlines()
    assert len(lines) == 501
    assert lines[-1] == "... 5 more matches not shown; narrow it"


def test_grep_lines_skip_vcs_and_filter(tree: Path) -> None:
    # a directory's own files come before its subdirectories, each level sorted
    assert grep(tree, "hello", max_matches=50) == (
        "main.py:2:print('hello')\n"
        ".hidden/secret.py:1:hello hidden\n"
        "src/pkg/data.txt:1:hello data\n"
        "src/pkg/mod.py:1:def hello():"
    )
    assert grep(tree, "(?i)hello", "src", glob="*.py", max_matches=50) == (
        "src/pkg/mod.py:1:def hello():\nsrc/pkg/mod.py:2:    return 'Hello'"
    )
    assert grep(tree, "Hello", "src/readme.md", max_matches=50) == "src/readme.md:1:# Hello"
    assert grep(tree, "hello", glob="pkg/*.txt", path="src", max_matches=50) == (
        "src/pkg/data.txt:1:hello data"
    )
    assert grep(tree, "nothing here", max_matches=5) == "no matches for 'nothing here' in ."


def test_grep_bad_regex(tree: Path) -> None:
    with pytest.raises(ToolError, match=r"bad regex '\(unclosed': missing \), unterminated"):
        grep(tree, "(unclosed", max_matches=5)


def test_grep_caps_matches_and_truncates_lines(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("match\n" * 30 + "match " + "x" * 400 + "\n")
    out = grep(tmp_path, "match", max_matches=10).splitlines()
    assert out[:10] == [f"many.txt:{i}:match" for i in range(1, 11)]
    assert out[10] == "... 21 more matches not shown; narrow the pattern, path or glob"
    long = grep(tmp_path, "x{10}", max_matches=10)
    assert long == "many.txt:31:match " + "x" * 294 + "..."


def test_grep_skips_binary_and_large_files(tmp_path: Path) -> None:
    (tmp_path / "bin.dat").write_bytes(b"needle\x00\x01")
    (tmp_path / "big.txt").write_bytes(b"needle\n" * (6 * 1024 * 1024 // 7))
    (tmp_path / "ok.txt").write_text("needle\n")
    assert grep(tmp_path, "needle", max_matches=5) == "ok.txt:1:needle"
    (tmp_path / "ok.txt").unlink()
    assert grep(tmp_path, "needle", max_matches=5) == (
        "no matches for 'needle' in . (2 binary or large files skipped)"
    )

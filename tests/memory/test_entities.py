"""Entity extraction from tool calls: realistic outputs, hostile inputs, arbitrary text, size."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.memory.ingest import entities
from gliding.memory.ingest.entities import Symbol, clean_path, extract

PYTEST_FAILURE = """exit code 1
============================= test session starts ==============================
collected 2 items

tests/test_calc.py F.                                                    [100%]

=================================== FAILURES ===================================
___________________________________ test_add ___________________________________

    def test_add():
>       assert add(1, 1) == 3
E       assert 2 == 3
E        +  where 2 = add(1, 1)

tests/test_calc.py:5: AssertionError
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_add - assert 2 == 3
========================= 1 failed, 1 passed in 0.03s ==========================
"""

TRACEBACK = """exit code 1
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
  File "app.py", line 6, in main
    return compute(0)
  File "lib/calc.py", line 3, in compute
    return 1 / x
           ~~^~~
ZeroDivisionError: division by zero
"""

GREP = """src/app.py:12:def main(argv):
src/app.py:30:class Config(BaseModel):
lib/util.js:4:export function parse(text) {
README.md:7:Run `python src/app.py` to start."""

LS = """exit code 0
total 8
drwxr-xr-x 2 u u 4096 Jan  1 12:00 src
-rw-r--r-- 1 u u   12 Jan  1 12:00 hello.txt
lrwxrwxrwx 1 u u    5 Jan  1 12:00 Makefile -> build/Makefile
"""

GIT_LOG = """exit code 0
commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f
Author: Ann <ann@example.com>
Date:   Mon Jan 1 12:00:00 2024 +0000

    fix parser crash (#42) in src/parse.py, run 550e8400-e29b-41d4-a716-446655440000

abc1234 (HEAD -> main) add deadbeef support, see https://example.com/x.py
"""


def test_a_pytest_failure_gives_the_test_file_the_test_and_the_failure() -> None:
    found = extract("bash", {"command": "pytest -q tests/test_calc.py"}, PYTEST_FAILURE)
    assert found.files == ("tests/test_calc.py",)
    assert found.symbols == (Symbol("test_add", "tests/test_calc.py"),)
    assert found.errors == ("E assert 2 == 3", "tests/test_calc.py:5: AssertionError",
                            "FAILED tests/test_calc.py::test_add - assert 2 == 3")


def test_a_traceback_gives_workspace_frames_and_its_last_line() -> None:
    found = extract("bash", {"command": "python app.py"}, TRACEBACK)
    assert found.files == ("app.py", "lib/calc.py")  # the absolute library path is left out
    assert found.symbols == (Symbol("main", "app.py", 6), Symbol("compute", "lib/calc.py", 3))
    assert found.errors == ("ZeroDivisionError: division by zero",)


def test_a_custom_exception_ends_a_traceback() -> None:
    out = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n" \
          "mypkg.Boom: it broke\n"
    found = extract("bash", {}, out)
    assert found.errors == ("mypkg.Boom: it broke",) and found.symbols == ()


def test_grep_lines_give_files_definitions_and_their_lines() -> None:
    found = extract("grep", {"pattern": "def |class ", "path": "."}, GREP)
    assert found.files == ("src/app.py", "lib/util.js", "README.md")
    assert found.symbols == (Symbol("main", "src/app.py", 12), Symbol("Config", "src/app.py", 30),
                             Symbol("parse", "lib/util.js", 4))
    assert found.errors == ()


def test_ls_listings_and_list_dir_entries_are_files() -> None:
    ls = extract("bash", {"command": "ls -l"}, LS)
    assert ls.files == ("src", "hello.txt", "Makefile", "build/Makefile")
    listed = extract("list_dir", {"path": "src"}, "a.py\nsub/\nlink@\n... 3 more entries")
    assert listed.files == ("src", "src/a.py", "src/sub", "src/link")
    assert extract("glob", {"pattern": "**/*.py"}, "no files match '**/*.py'").files == ()


def test_git_log_gives_ids_not_words_or_urls() -> None:
    found = extract("bash", {"command": "git log -2"}, GIT_LOG)
    assert found.ids == ("3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f",
                         "550e8400-e29b-41d4-a716-446655440000", "#42", "abc1234")
    assert found.files == ("src/parse.py",)  # not the e-mail address, not the URL


def test_read_file_knows_the_lines_of_the_page_it_shows() -> None:
    out = "src/a.py lines 10-13 of 40\nimport os\n\nasync def go(x):\n    return x\n"
    found = extract("read_file", {"path": "src/a.py", "offset": 10}, out)
    assert found.files == ("src/a.py",)
    assert found.symbols == (Symbol("go", "src/a.py", 12),)


def test_written_content_gives_its_definitions() -> None:
    found = extract("write_file", {"path": "pkg/m.py", "content": "class A:\n    def b(self):\n"},
                    "wrote 30 bytes to pkg/m.py")
    assert found.symbols == (Symbol("A", "pkg/m.py", 1), Symbol("b", "pkg/m.py", 2))


def test_a_failed_call_is_an_error_and_other_languages_are_read() -> None:
    failed = extract("read_file", {"path": "missing.py"}, "error: missing.py does not exist", False)
    assert failed.errors == ("error: missing.py does not exist",)
    assert failed.files == ("missing.py",)
    gcc = extract("bash", {}, "src/m.c:3:5: error: expected ';' before '}' token\n")
    assert gcc.files == ("src/m.c",) and gcc.errors[0].startswith("src/m.c:3:5: error:")
    js = extract("bash", {}, "TypeError: x is undefined\n    at parse (src/p.js:4:11)\n")
    assert js.symbols == (Symbol("parse", "src/p.js", 4),) and js.errors[0].startswith("TypeError")
    rust = extract("read_file", {"path": "lib.rs"}, "lib.rs lines 1-2 of 2\npub fn new() -> T {\n"
                   "pub(crate) struct Parser {\n")
    assert [s.name for s in rust.symbols] == ["new", "Parser"]


def test_hostile_paths_are_normalised_or_refused() -> None:
    assert clean_path("./src/../src/a.py") == "src/a.py"
    assert clean_path('we "ird" <dir>/ü ñ.py') == 'we "ird" <dir>/ü ñ.py'
    for bad in ("../etc/passwd", "a/../../b", "/etc/passwd", "~/x", "C:\\x.py", "http://h/x.py",
                "a\nb.py", "a\x00.py", "a\u202e.py", "x" * 301, "", ".", "..", "a\\b.py"):
        assert clean_path(bad) is None, bad
    found = extract("read_file", {"path": "../secret.py", "paths": ["ok.py", 3, None]}, "")
    assert found.files == ("ok.py",)


def test_words_calls_and_prose_are_not_entities() -> None:
    text = "We use os.path and response.json() here; e.g. 1.5 and v1.2.3 and class of things.\n" \
           "Error handling is covered. 1234567 deadbeef and #x and &#123;\n"
    found = extract("bash", {}, text)
    assert found.files == () and found.symbols == () and found.ids == ()
    assert found.errors == ()


def test_each_kind_is_capped() -> None:
    out = "\n".join(f"f{i}.py:1: ValueError: bad {i} {i:07x}a #{i}" for i in range(500))
    found = extract("bash", {}, out)
    assert len(found.files) == entities.MAX_FILES
    assert len(found.errors) == entities.MAX_ERRORS
    assert len(found.ids) == entities.MAX_IDS
    long_error = extract("bash", {}, "ValueError: " + "x" * 5000)
    assert len(long_error.errors[0]) <= entities.MAX_ERROR_CHARS


def test_a_huge_output_is_read_only_at_its_ends() -> None:
    middle = "src/middle.py:1: ValueError: in the middle\n"
    out = ("src/head.py:1:def head():\n" + "a" * 5_000_000 + "\n" + middle + "b(" * 1_000_000
           + "\nsrc/tail.py:2: RuntimeError: at the end\n")
    found = extract("bash", {"command": "x"}, out)
    assert found.files == ("src/head.py", "src/tail.py")
    assert found.errors == ("src/tail.py:2: RuntimeError: at the end",)
    assert len(entities.scan_window(out)) == 2 * entities.SCAN_CHARS + 1
    pathological = ("a." * 3_000_000 + "\n" + "E" * 1_000_000 + "\n" + "0a" * 1_000_000
                    + "\n" + ":1" * 1_000_000)
    extract("bash", {}, pathological)  # completes: no pattern backtracks over a long line


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
tool_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.lists(
    st.sampled_from([PYTEST_FAILURE, TRACEBACK, GREP, LS, GIT_LOG, "\n", "::", ":1:", "File \"",
                     "Traceback (most recent call last):", "E   ", "#1", "../", "a.py", "\u2028"]),
    max_size=8).map("".join)


@settings(max_examples=200, deadline=None)
@given(tool=st.sampled_from(["bash", "grep", "glob", "list_dir", "read_file", "write_file",
                             "edit_file", "", "x"]),
       arguments=st.dictionaries(st.sampled_from(["path", "pattern", "command", "content",
                                                  "new", "paths", "other"]), json_values,
                                 max_size=5),
       output=tool_text, ok=st.booleans())
def test_any_input_gives_bounded_clean_entities(tool: str, arguments: dict[str, Any],
                                                output: str, ok: bool) -> None:
    found = extract(tool, arguments, output, ok)
    assert len(found.files) <= entities.MAX_FILES and len(found.ids) <= entities.MAX_IDS
    assert len(found.symbols) <= entities.MAX_SYMBOLS
    assert len(found.errors) <= entities.MAX_ERRORS
    for path in found.files:
        assert clean_path(path) == path and not path.startswith(("/", "../"))
    for error in found.errors:
        assert error and "\n" not in error and len(error) <= entities.MAX_ERROR_CHARS
    if not ok:
        assert found.errors


def test_clean_path_is_idempotent_when_quotes_and_spaces_nest() -> None:
    # found by the property test above: 'File "' once cleaned to 'File ', which cleans again
    for text, expected in [('File "', "File"), (' "a b" ', "a b"), ("\"'x'\"", "x")]:
        assert clean_path(text) == expected
        assert clean_path(expected) == expected

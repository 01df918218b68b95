"""The memory group's line reads and its note tool.

- ``read_result`` by lines gives exactly the lines ``str.splitlines(keepends=True)`` gives
  (CRLF, a last line without a newline), whole lines within a page, a notice where more
  follows; an IRI's ``#L12`` / ``#L12-14`` fragment picks the lines when no argument does;
- every bad line argument or fragment is a tool error that says what to send instead;
- ``note`` answers with the finding cut short and keeps its resolved source in the data; it
  needs no archive; a bad finding or source is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.config.settings import ToolSettings
from gliding.tools.base import ToolContext, ToolOutcome, Toolset
from gliding.tools.readback import LINE_PAGE, NOTE, PAGE_CHARS, MemoryGroup

BASE = "gliding://job/j/"
IRI = BASE + "result/DA.1-3-0"
NEXT_LINES = re.compile(r"\n\[lines (\d+)-(\d+) of (\d+); next: line_start=(\d+)\]$")
NEXT_CHARS = re.compile(r"\n\[line (\d+) has (\d+) characters, this is its first "
                        rf"{PAGE_CHARS}; next: offset=(\d+)\]$")
CHAR_NOTICE = re.compile(r"\n\[characters \d+-\d+ of \d+; next: offset=\d+\]$")


class _Reader:
    """One archived text, whatever the IRI; remembers the IRIs it was asked for."""

    def __init__(self, text: str) -> None:
        self.text, self.asked = text, list[str]()

    async def read_text(self, iri: str) -> str:
        self.asked.append(iri)
        return self.text


def _use(archived: str, tool: str, /, **args: Any) -> ToolOutcome:
    return _using(MemoryGroup(_Reader(archived), iri_base=BASE), tool, **args)


def _using(group: MemoryGroup, tool: str, /, **args: Any) -> ToolOutcome:
    ctx = ToolContext(Path("."), ToolSettings())
    return anyio.run(Toolset(group.tools).call, tool, args, ctx)


def _read(text: str, **args: Any) -> str:
    out = _use(text, "read_result", **{"iri": IRI, **args})
    assert out.ok, out.output
    return out.output


def _all_lines(text: str) -> list[str]:
    """Every page from line 1 on, following the notices, with the notices taken off; a line
    longer than a page goes on by characters, as its notice says."""
    pages: list[str] = []
    start = 1
    while True:
        out = _read(text, line_start=start)
        if found := NEXT_LINES.search(out):
            pages.append(out[: found.start()])
            start = int(found[4])
        elif found := NEXT_CHARS.search(out):
            pages.append(out[: found.start()])
            offset, end = int(found[3]), int(found[3]) - PAGE_CHARS + int(found[2])
            while offset < end:
                chunk = CHAR_NOTICE.sub("", _read(text, offset=offset,
                                                  limit=min(PAGE_CHARS, end - offset)))
                pages.append(chunk)
                offset += len(chunk)
            start = int(found[1]) + 1
            if start > len(text.splitlines()):
                return pages
        else:
            return [*pages, out]


# --- lines read back exactly -------------------------------------------------------------------


@pytest.mark.parametrize(("text", "start", "end", "expected"), [
    ("a\nb\nc\n", 2, 2, "b\n"),
    ("a\nb\nc", 2, 3, "b\nc"),  # no newline at the end: none added
    ("one\r\ntwo\r\nthree\r\n", 2, 3, "two\r\nthree\r\n"),  # CRLF kept whole
    ("mac\rold\rstyle", 1, 2, "mac\rold\r"),  # splitlines' own line ends
    ("x\n\n\ny\n", 2, 4, "\n\ny\n"),  # empty lines are lines
])
def test_lines_read_back_byte_for_byte(text: str, start: int, end: int, expected: str) -> None:
    out = _read(text, line_start=start, line_end=end)
    lines = text.splitlines(keepends=True)
    rest = (f"\n[lines {start}-{end} of {len(lines)}; next: line_start={end + 1}]"
            if end < len(lines) else "")
    assert out == expected + rest


def test_lines_are_numbered_as_grep_result_numbers_them() -> None:
    text = "alpha\r\nbeta\ngamma\n"
    hit = _use(text, "grep_result", iri=IRI, pattern="gam")
    assert hit.ok and hit.output == "3: gamma"
    assert _read(text, line_start=3) == "gamma\n"


BODY = st.one_of(  # a line without its end: short ones, now and then one over a page
    st.text(st.characters(blacklist_categories=["Cs"],
                          blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
            max_size=60),
    st.integers(PAGE_CHARS - 5, PAGE_CHARS * 2 + 5).map(lambda n: "z" * n))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(BODY, st.sampled_from(["\n", "\r\n", "\r"])), max_size=250),
       st.booleans())
def test_line_pages_concatenate_to_the_archived_text(
    lines: list[tuple[str, str]], last_newline: bool
) -> None:
    text = "".join(body + end for body, end in lines)
    if lines and not last_newline:
        text = text[: -len(lines[-1][1])]
    if text.splitlines():
        assert "".join(_all_lines(text)) == text


def test_line_pages_follow_a_line_longer_than_a_page_by_characters() -> None:
    text = "head\n" + "x" * (PAGE_CHARS * 2 + 7) + "\ntail\n"
    out = _read(text, line_start=2)
    assert out == "x" * PAGE_CHARS + (f"\n[line 2 has {PAGE_CHARS * 2 + 8} characters, this is "
                                      f"its first {PAGE_CHARS}; next: offset={5 + PAGE_CHARS}]")
    assert "".join(_all_lines(text)) == text


# --- the page bound and its notice -------------------------------------------------------------


def test_line_end_left_out_gives_a_page_of_lines_with_a_notice() -> None:
    text = "".join(f"line {n}\n" for n in range(1, 251))
    out = _read(text, line_start=101)
    assert out == "".join(f"line {n}\n" for n in range(101, 101 + LINE_PAGE)) + (
        f"\n[lines 101-{100 + LINE_PAGE} of 250; next: line_start={101 + LINE_PAGE}]")
    assert _read(text, line_start=201) == "".join(f"line {n}\n" for n in range(201, 251))


def test_a_page_of_lines_stops_at_a_line_boundary_within_page_chars() -> None:
    line = "y" * 299 + "\n"
    text = line * 50
    out = _read(text, line_start=1, line_end=50)
    fit = PAGE_CHARS // len(line)
    assert out == line * fit + f"\n[lines 1-{fit} of 50; next: line_start={fit + 1}]"
    assert len(out) <= PAGE_CHARS + 100


def test_line_end_past_the_last_line_reads_to_the_end() -> None:
    assert _read("a\nb\nc\n", line_start=2, line_end=99) == "b\nc\n"


# --- fragments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("iri", "expected"), [
    (IRI + "#L2", "b\n\n[lines 2-2 of 5; next: line_start=3]"),
    (IRI + "#L2-4", "b\nc\nd\n\n[lines 2-4 of 5; next: line_start=5]"),
    (IRI + "#L4-5", "d\ne"),
    ("result/DA.1-3-0#L5", "e"),  # relative, as the history block shows IRIs
    (f"<{IRI}#L5>", "e"),
])
def test_a_line_fragment_picks_the_lines(iri: str, expected: str) -> None:
    reader = _Reader("a\nb\nc\nd\ne")
    out = _using(MemoryGroup(reader, iri_base=BASE), "read_result", iri=iri)
    assert out.ok and out.output == expected
    assert reader.asked == [IRI]  # the archive is asked without the fragment


def test_arguments_win_over_the_fragment() -> None:
    text = "a\nb\nc\nd\ne"
    assert _read(text, iri=IRI + "#L2-3", line_start=4, line_end=5) == "d\ne"
    assert _read(text, iri=IRI + "#L2-3", offset=6, limit=3) == (
        "d\ne")  # characters asked for: the fragment does not apply
    assert _read(text, iri=IRI + "#L2-3", limit=2) == "a\n\n[characters 0-2 of 9; next: offset=2]"


@pytest.mark.parametrize("iri", [IRI + "#L2-3", IRI + "#junk"])
def test_grep_result_ignores_the_fragment(iri: str) -> None:
    reader = _Reader("a\nb\nc\n")
    out = _using(MemoryGroup(reader, iri_base=BASE), "grep_result", iri=iri, pattern="[ac]")
    assert out.ok and out.output == "1: a\n3: c"
    assert reader.asked == [IRI]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    ({"line_start": 0}, "line_start must be >= 1 (lines are numbered from 1), got 0"),
    ({"line_start": -3, "line_end": 2}, "line_start must be >= 1"),
    ({"line_start": 3, "line_end": 2}, "line_end 2 is before line_start 3"),
    ({"line_end": 2}, "line_end needs line_start"),
    ({"line_start": 4}, "line_start=4 is past the end: the result has 3 lines"),
    ({"line_start": 10**12, "line_end": 10**12 + 1}, "past the end: the result has 3 lines"),
    ({"line_start": 1, "offset": 0}, "give offset/limit (characters) or line_start/line_end "
                                     "(lines), not both"),
    ({"line_end": 2, "limit": 10}, "not both"),
    ({"iri": IRI + "#L9"}, "line_start=9 is past the end: the result has 3 lines"),
    ({"iri": IRI + "#Lx"}, "bad line fragment '#Lx'"),
    ({"iri": IRI + "#L5-2"}, "bad line fragment '#L5-2'"),
    ({"iri": IRI + "#L0"}, "bad line fragment"),
    ({"iri": IRI + "#L3-"}, "bad line fragment"),
    ({"iri": IRI + "#section"}, "bad line fragment"),
    ({"iri": IRI + "#Lx", "offset": 2}, "bad line fragment"),
    ({"line_start": "2"}, "argument 'line_start' must be an integer"),
])
def test_bad_line_input_is_a_clear_tool_error(args: dict[str, Any], says: str) -> None:
    out = _use("a\nb\nc\n", "read_result", **{"iri": IRI, **args})
    assert not out.ok and out.output.startswith("error: ") and says in out.output, out.output


def test_a_bad_fragment_says_how_lines_are_named() -> None:
    out = _use("a\n", "read_result", iri=IRI + "#L5-2")
    assert not out.ok and "#L12 or #L12-14" in out.output


def test_an_empty_result_has_no_lines() -> None:
    out = _use("", "read_result", iri=IRI, line_start=1)
    assert not out.ok and "past the end: the result has 0 lines" in out.output
    one = _use("only", "read_result", iri=IRI, line_start=2)
    assert not one.ok and "the result has 1 line" in one.output


# --- note --------------------------------------------------------------------------------------


def test_note_answers_with_the_finding_cut_short_and_keeps_its_source() -> None:
    finding = "The staging database listens on port 5433, not 5432 as the README says; " \
              "the compose file overrides it."
    out = _use("", "note", text=f"  {finding}\n", source="result/DA.1-3-0#L12-14")
    assert out.ok
    assert out.output.startswith("noted: The staging database") and out.output.endswith("…")
    assert len(out.output) == len("noted: ") + 80
    assert out.data == {"text": finding, "source": IRI + "#L12-14"}  # relative: resolved


@pytest.mark.parametrize("source", ["https://example.org/docs?a=1#part", "http://x.test/",
                                    IRI, IRI + "#L3"])
def test_note_keeps_an_absolute_source_as_written(source: str) -> None:
    out = _use("", "note", text="a finding", source=f" {source} ")
    assert out.ok and out.output == "noted: a finding"
    assert out.data == {"text": "a finding", "source": source}


@pytest.mark.parametrize("source", [None, "", "   "])
def test_note_without_a_source(source: str | None) -> None:
    group = MemoryGroup(None)  # no archive, no long-term memory: note still works
    out = _using(group, "note", text="a line\nand another", source=source)
    assert out.ok and out.output == "noted: a line and another"
    assert out.data == {"text": "a line\nand another"}


@pytest.mark.parametrize(("args", "says"), [
    ({"text": ""}, "note needs the finding as text"),
    ({"text": " \n\t"}, "note needs the finding as text"),
    ({"text": "x" * 501}, "a finding is at most 500 characters, this one has 501"),
    ({"text": "f", "source": "gliding://job/j/result/a b"}, "is not an IRI"),
    ({"text": "f", "source": "ftp://example.org/file"}, "is not an IRI"),
    ({"text": "f", "source": "https://example.org/" + "x" * 1000}, "at most 1000 characters"),
    ({"text": "f", "source": IRI + "#junk"}, "bad line fragment '#junk'"),
    ({"text": "f", "source": 12}, "argument 'source' must be a string"),
    ({"source": IRI}, "missing required argument 'text'"),
])
def test_note_refuses_a_bad_finding_or_source(args: dict[str, Any], says: str) -> None:
    out = _use("", "note", **args)
    assert not out.ok and out.output.startswith("error: ") and says in out.output, out.output


def test_a_relative_source_needs_the_jobs_iri_base() -> None:
    out = _using(MemoryGroup(None), "note", text="a finding", source="result/DA.1-3-0")
    assert not out.ok and "is not an IRI" in out.output and "gliding://" in out.output
    assert _using(MemoryGroup(None), "note", text="a finding", source="x" * 500_000).output \
        .count("x") < 300  # the refusal quotes the source cut short


def test_note_outside_a_memory_group_says_what_it_needs() -> None:
    ctx = ToolContext(Path("."), ToolSettings())
    out = anyio.run(Toolset((NOTE,)).call, "note", {"text": "a finding"}, ctx)
    assert not out.ok and "needs the memory group" in out.output

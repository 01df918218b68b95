"""Search tools: glob (file names) and grep (file contents, Python regex), confined and bounded.

Both walk the tree from open descriptors (``_tree``): each directory is opened with O_NOFOLLOW
relative to its parent, so a symlinked directory is never descended into and a link swapped
in mid-walk cannot lead the walk out; a symlinked file is only read or listed when it resolves
inside the workspace (``workspace.locate``), and a file is read only when it is regular and
has one hard link (``workspace.open_regular`` says why). Neither enters, reads or names
anything inside the data directory (``protected.tool_guard``). A walk stops
``MAX_WALK_DEPTH`` levels down, after ``MAX_WALK_ENTRIES`` entries and at the call's
deadline; the answer says what it left out.

Like the file tools, both run in a worker thread that is waited for and stops at the call's
deadline itself (TimeoutError).

Patterns are checked with ``re`` (its syntax, its error messages) but run on the ``regex``
module, with a time limit per line or path (``LINE_TIMEOUT_S``) and the GIL released: ``re``
can backtrack for hours on one line, e.g. ``(a|aa)+$`` on a long run of a's, and nothing can
stop it.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread
import regex

from gliding.core.text import clip
from gliding.errors import ConfinementError, ToolError
from gliding.tools.base import CALL_TIMEOUT_S, Tool, ToolContext, check_deadline, prop, schema
from gliding.tools.protected import context_guard, reachable
from gliding.tools.workspace import (
    Guard,
    Located,
    check_path,
    display_path,
    locate,
    open_regular,
)

MAX_GLOB_RESULTS = 500
MAX_GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 5 * 1024 * 1024
MAX_WALK_DEPTH = 64  # directory levels below the searched one
MAX_WALK_ENTRIES = 200_000  # names one walk looks at
LINE_TIMEOUT_S = 1.0  # one regex match on one line or path, at most
SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAGIC = re.compile(r"[*?\[]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Skip(Enum):
    """Why a file was not searched."""

    BIG = "binary, large or not a regular file"
    LINKED = "several hard links"


def compile_regex(pattern: str) -> Any:
    """``pattern`` compiled for ``search_lines`` (a ``regex`` Pattern).

    Raises:
        ToolError: not a valid Python regex (``re``'s message).
    """
    try:
        re.compile(pattern)
        return regex.compile(pattern)
    except (re.error, regex.error) as exc:
        raise ToolError(f"bad regex {shown_pattern(pattern)}: {exc}",
                        hint="grep takes a Python regex; escape ( [ . etc.") from exc


def shown_pattern(pattern: str) -> str:
    """A pattern as an answer quotes it: repr'd, cut short (the model sent it; once is enough)."""
    return clip(repr(pattern), 200)


def search_lines(compiled: Any, lines: Iterable[str], label: str,
                 deadline: float | None) -> Iterator[tuple[int, str]]:
    """(1-based number, line) of each of ``lines`` that ``compiled`` matches somewhere.

    Raises:
        ToolError: one line took over ``LINE_TIMEOUT_S``: the pattern backtracks too much.
        TimeoutError: ``deadline`` passed.
    """
    for number, line in enumerate(lines, start=1):
        if _bounded(compiled.search, line, deadline, partial("on line {} of {}".format, number,
                                                             label)):
            yield number, line


def _bounded(match: Callable[..., Any], text: str, deadline: float | None,
             where: Callable[[], str]) -> bool:
    """Whether ``match`` (a ``regex`` Pattern's search or fullmatch) matches ``text``, within
    ``LINE_TIMEOUT_S`` and ``deadline``."""
    check_deadline(deadline)
    left = LINE_TIMEOUT_S if deadline is None else min(LINE_TIMEOUT_S, deadline - time.monotonic())
    try:
        return match(text, timeout=max(left, 0.001), concurrent=True) is not None
    except TimeoutError:
        check_deadline(deadline)
        raise ToolError(
            f"the pattern took over {LINE_TIMEOUT_S:g}s {where()}: it backtracks too much "
            "(nested or overlapping repeats such as (a+)+ or (a|aa)+)",
            hint="simplify it: drop the nesting, make alternatives exclusive, anchor it",
        ) from None


def glob_regex(pattern: str) -> Any:
    """A ``regex`` Pattern that fully matches the '/'-separated relative paths ``pattern``
    matches.

    ``*`` and ``?`` stay inside one path component, ``**`` spans any number of components (a
    run of them is one), ``[...]`` is a character class (``[!...]`` negated), and wildcards skip
    names starting with '.'.
    """
    parts: list[str] = []
    for seg in pattern.split("/"):
        if not (seg == "**" and parts and parts[-1] == "**"):
            parts.append(seg)
    out: list[str] = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            out.append(r"(?!\.)[^/]+(?:/(?!\.)[^/]+)*" if last else r"(?:(?!\.)[^/]+/)*")
            continue
        out.append(_segment_regex(seg) + ("" if last else "/"))
    return regex.compile("".join(out))


def _segment_regex(seg: str) -> str:
    out = [r"(?!\.)"] if seg[:1] in ("*", "?", "[") else []
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out.append(r"[^/]*")
        elif c == "?":
            out.append(r"[^/]")
        elif c == "[" and (end := seg.find("]", i + 2)) != -1:
            body = seg[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append(("[^/" if negate else "[") + body.replace("\\", r"\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass
class _Walk:
    """What one walk looked at and left out, for the notice at the end of an answer."""

    seen: int = 0
    too_deep: int = 0  # directories not entered: below MAX_WALK_DEPTH
    stopped: bool = False  # MAX_WALK_ENTRIES reached

    def notice(self) -> str:
        notes = []
        if self.too_deep:
            notes.append(f"[{self.too_deep} director{'ies' if self.too_deep > 1 else 'y'} "
                         f"deeper than {MAX_WALK_DEPTH} levels not searched; search from "
                         "further down]")
        if self.stopped:
            notes.append(f"[the walk stopped after {MAX_WALK_ENTRIES} entries; narrow the "
                         "path or the pattern]")
        return "\n".join(notes)


def _tree(top: int, walk: _Walk, deadline: float | None, enter: Callable[[str], bool]
          ) -> Iterator[tuple[str, int, list[os.DirEntry[str]]]]:
    """(directory relative to ``top`` ('' for it), its descriptor, its entries by name) for
    ``top`` and each directory below it whose path (relative to ``top``) ``enter`` accepts;
    a directory's entries come before its subdirectories'. The descriptor is open until the
    next step.

    Only the descriptors of the current path are open (MAX_WALK_DEPTH at most); ``top`` stays
    the caller's.
    """
    entries = _entries(top, walk, deadline)
    yield "", top, entries
    stack = [(top, "", iter(_subdirs(entries, enter, "")))]
    try:
        while stack and not walk.stopped:
            fd, rel, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                stack.pop()
                if fd != top:
                    os.close(fd)
                continue
            if len(stack) > MAX_WALK_DEPTH:
                walk.too_deep += 1
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link since it was listed: not entered
            child_rel = f"{rel}/{name}" if rel else name
            stack.append((child, child_rel, iter(())))  # closed by the finally from here on
            entries = _entries(child, walk, deadline)
            stack[-1] = (child, child_rel, iter(_subdirs(entries, enter, child_rel)))
            yield child_rel, child, entries
    finally:
        for fd, _, _ in stack:
            if fd != top:
                os.close(fd)


def _entries(fd: int, walk: _Walk, deadline: float | None) -> list[os.DirEntry[str]]:
    found = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                walk.seen += 1
                if walk.seen > MAX_WALK_ENTRIES:
                    walk.stopped = True
                    break
                if walk.seen % 256 == 0:
                    check_deadline(deadline)
                found.append(entry)
    except TimeoutError:  # an OSError too, but the deadline, not an unreadable directory
        raise
    except OSError:
        pass  # unreadable: nothing in it is searched
    return sorted(found, key=lambda e: e.name)


def _subdirs(entries: list[os.DirEntry[str]], enter: Callable[[str], bool], rel: str
             ) -> list[str]:
    return [e.name for e in entries if _is_dir(e) and enter(posixpath.join(rel, e.name))]


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def glob(workspace: Path, pattern: str, *, deadline: float | None = None,
         guard: Guard | None = None) -> str:
    """Workspace-relative paths matching ``pattern``, sorted, dirs ending with '/'; none
    below a directory ``guard`` refuses.

    Raises:
        ConfinementError: the pattern holds a NUL byte, is absolute or climbs out, or names
            (without wildcards) a path ``guard`` refuses.
        ToolError: the pattern is empty, or so complex that matching one path took over
            ``LINE_TIMEOUT_S``.
        TimeoutError: ``deadline`` passed.
    """
    if not isinstance(pattern, str) or not pattern.strip("/"):
        raise ToolError("glob pattern must be a non-empty relative pattern, e.g. '**/*.py'")
    check_path(pattern, "glob pattern")
    norm = posixpath.normpath(pattern)
    if norm == ".." or norm.startswith("../"):
        raise ConfinementError(
            f"glob pattern {pattern!r} climbs out of the workspace", hint="e.g. 'src/**/*.py'"
        )
    walk = _Walk()
    if not _MAGIC.search(norm):
        kind = _kind(workspace, norm, refuse=True, guard=guard)
        return _glob_result([norm + kind] if kind is not None else [], pattern, walk)
    parts = norm.split("/")
    literal = 0
    while literal < len(parts) - 1 and not _MAGIC.search(parts[literal]):
        literal += 1
    prefix = "/".join(parts[:literal])
    compiled = glob_regex(norm)
    hidden = any(p.startswith(".") for p in parts)
    try:
        base = locate(workspace, prefix or ".", guard=guard)
    except ConfinementError:
        raise
    except ToolError:  # the literal prefix is missing or not a directory: nothing matches
        return _glob_result([], pattern, walk)
    found: list[str] = []
    with base:
        if not base.is_dir or base.fd is None:
            return _glob_result([], pattern, walk)
        def enter(sub: str) -> bool:
            return ((hidden or not posixpath.basename(sub).startswith("."))
                    and reachable(guard, posixpath.join(base.real, sub)))

        for sub, _, entries in _tree(base.fd, walk, deadline, enter):
            for entry in entries:
                rel = posixpath.join(prefix, sub, entry.name)
                if not _bounded(compiled.fullmatch, rel, deadline,
                                lambda: f"to match {shown_pattern(pattern)} against one path"):
                    continue
                if entry.is_symlink():
                    kind = _kind(workspace, rel, guard=guard)
                    if kind is None:
                        continue  # it leads out of the workspace
                else:
                    kind = "/" if _is_dir(entry) else ""
                found.append(rel + kind)
    return _glob_result(sorted(found), pattern, walk)


def _kind(workspace: Path, rel: str, *, refuse: bool = False,
          guard: Guard | None = None) -> str | None:
    """'/' for a directory, '' for anything else, None when nothing is there (a dangling link
    included) or ``rel`` leads out or where ``guard`` refuses, which ``refuse`` makes a
    ConfinementError (a path the model named, not one a walk found)."""
    try:
        with locate(workspace, rel, guard=guard) as found:
            if found.st is None:
                return None
            return "/" if found.is_dir else ""
    except ConfinementError:
        if refuse:
            raise
        return None
    except ToolError:
        return None


def _glob_result(found: list[str], pattern: str, walk: _Walk) -> str:
    lines = found[:MAX_GLOB_RESULTS] or [f"no files match {shown_pattern(pattern)}"]
    if len(found) > MAX_GLOB_RESULTS:
        lines.append(f"... {len(found) - MAX_GLOB_RESULTS} more matches not shown; narrow it")
    if notice := walk.notice():
        lines.append(notice)
    return "\n".join(lines)


def grep(
    workspace: Path, pattern: str, path: str = ".", glob: str | None = None, *, max_matches: int,
    deadline: float | None = None, guard: Guard | None = None,
) -> str:
    """Lines matching the regex ``pattern`` as ``relpath:lineno:line``, at most ``max_matches``.

    Skips binary files (a NUL in the first 8 KiB), files over 5 MiB, files with several hard
    links, VCS directories, symlinks that lead out of the workspace and what ``guard``
    refuses; ``glob`` filters file names (or relative paths when it holds a '/').

    Raises:
        ConfinementError: ``path`` leaves the workspace or ``guard`` refuses it.
        ToolError: a bad regex or one that backtracks too much, a NUL in ``glob``, or a missing
            path.
        TimeoutError: ``deadline`` passed.
    """
    compiled = compile_regex(pattern)
    if glob is not None and "\x00" in glob:
        raise ToolError(f"glob {glob!r} contains a NUL byte",
                        hint="drop the NUL byte; e.g. glob='*.py'")
    name_filter = glob_regex(glob) if glob else None
    shown = display_path(path)
    matches: list[str] = []
    more = 0
    skipped = {_Skip.BIG: 0, _Skip.LINKED: 0}
    walk = _Walk()
    with locate(workspace, path, guard=guard) as top:
        if top.st is None:
            raise ToolError(f"no such file: {path}",
                            hint="call list_dir or glob to see what exists")
        files = _texts(workspace, top, name_filter, bool(glob and "/" in glob), walk, deadline,
                       guard)
        for rel, text in files:
            if isinstance(text, _Skip):
                skipped[text] += 1
                continue
            where = shown if not rel else rel if shown == "." else posixpath.join(shown, rel)
            for lineno, line in search_lines(compiled, text.splitlines(), where, deadline):
                if len(matches) < max_matches:
                    matches.append(f"{where}:{lineno}:{_cut(line)}")
                else:
                    more += 1
    if matches:
        if more:
            matches.append(f"... {more} more matches not shown; narrow the pattern, path or glob")
        out = "\n".join(matches)
    else:
        notes = []
        if skipped[_Skip.BIG]:
            notes.append(f"{skipped[_Skip.BIG]} binary or large files skipped")
        if skipped[_Skip.LINKED]:
            notes.append(f"{skipped[_Skip.LINKED]} files with several hard links skipped: "
                         "another link may lie outside the workspace")
        note = f" ({'; '.join(notes)})" if notes else ""
        out = f"no matches for {shown_pattern(pattern)} in {shown}{note}"
    notice = walk.notice()
    return f"{out}\n{notice}" if notice else out


def _texts(workspace: Path, top: Located, name_filter: Any, by_path: bool, walk: _Walk,
           deadline: float | None, guard: Guard | None = None
           ) -> Iterator[tuple[str, str | _Skip]]:
    """(path relative to ``top``, its text or why it is not searched) of each file to search,
    in walk order."""
    if not top.is_dir:
        if top.fd is not None:
            yield "", _text(top.fd, deadline)
        return
    assert top.fd is not None
    def enter(sub: str) -> bool:
        return (posixpath.basename(sub) not in SKIP_DIRS
                and reachable(guard, posixpath.join(top.real, sub)))

    for sub, fd, entries in _tree(top.fd, walk, deadline, enter):
        for entry in entries:
            rel = f"{sub}/{entry.name}" if sub else entry.name
            if name_filter is not None and not _bounded(
                    name_filter.fullmatch, rel if by_path else entry.name, deadline,
                    lambda: "to match the glob against one path"):
                continue
            if entry.is_symlink():
                text = _linked_text(workspace, posixpath.join(top.real, rel), deadline, guard)
            elif entry.is_file(follow_symlinks=False):
                text = _text_at(fd, entry.name, deadline)
            else:
                continue
            if text is not None:
                yield rel, text


def _linked_text(workspace: Path, rel: str, deadline: float | None,
                 guard: Guard | None = None) -> str | _Skip | None:
    """The text of the file the symlink ``rel`` (from the root) leads to; None when it leads
    out or where ``guard`` refuses, to a directory or to nothing (not a file to search)."""
    try:
        with open_regular(workspace, rel, guard) as found:
            assert found.fd is not None
            return _text(found.fd, deadline)
    except ConfinementError as exc:
        return _Skip.LINKED if "hard links" in exc.message else None
    except ToolError:
        return None


def _text_at(dir_fd: int, name: str, deadline: float | None) -> str | _Skip | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # gone, or swapped for a link since it was listed
    try:
        return _text(fd, deadline)
    finally:
        os.close(fd)


def _text(fd: int, deadline: float | None) -> str | _Skip:
    """The decoded text of the open file ``fd``, or why it is not searched."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_GREP_FILE_BYTES:
            return _Skip.BIG
        if st.st_nlink > 1:
            return _Skip.LINKED
        pieces = []
        while piece := os.read(fd, 1 << 16):
            check_deadline(deadline)
            pieces.append(piece)
            if sum(map(len, pieces)) > MAX_GREP_FILE_BYTES:  # it grew since the fstat
                return _Skip.BIG
    except TimeoutError:  # an OSError too, but the deadline, not an unreadable file
        raise
    except OSError:
        return _Skip.BIG
    data = b"".join(pieces)
    if b"\x00" in data[:8192]:
        return _Skip.BIG
    return data.decode("utf-8", errors="replace")


def _cut(line: str) -> str:
    return line if len(line) <= MAX_GREP_LINE_CHARS else line[:MAX_GREP_LINE_CHARS] + "..."


async def _glob(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: glob(ctx.workspace, args["pattern"], deadline=ctx.deadline,
                     guard=context_guard(ctx, write=False))
    )


async def _grep(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: grep(
            ctx.workspace,
            args["pattern"],
            args.get("path", "."),
            args.get("glob"),
            max_matches=ctx.settings.grep_max_matches,
            deadline=ctx.deadline,
            guard=context_guard(ctx, write=False),
        )
    )


GLOB = Tool(
    "glob",
    "Find files by glob pattern, e.g. '**/*.py'.",
    schema(["pattern"], pattern=prop("string", "glob relative to the workspace")),
    _glob,
    timeout_s=CALL_TIMEOUT_S,
)
GREP = Tool(
    "grep",
    "Search file contents with a Python regex; prints path:line:text.",
    schema(
        ["pattern"],
        pattern=prop("string", "Python regular expression"),
        path=prop("string", "file or directory to search (default '.')"),
        glob=prop("string", "only files whose name matches, e.g. '*.py'"),
    ),
    _grep,
    timeout_s=CALL_TIMEOUT_S,
)

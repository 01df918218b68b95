"""Search tools: glob (file names) and grep (file contents, Python regex), both confined.

Walks never follow a symlinked directory, and a symlinked file is only read or listed when its
real path is inside the workspace, so a link to '/' cannot make a search walk the whole disk.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread

from gliding.errors import ConfinementError, ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema
from gliding.tools.workspace import display_path, is_inside, resolve_in_workspace, workspace_root

MAX_GLOB_RESULTS = 500
MAX_GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 5 * 1024 * 1024
SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAGIC = re.compile(r"[*?\[]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex that fully matches the '/'-separated relative paths ``pattern`` matches.

    ``*`` and ``?`` stay inside one path component, ``**`` spans any number of components,
    ``[...]`` is a character class (``[!...]`` negated), and wildcards skip names starting with '.'.
    """
    parts = pattern.split("/")
    out: list[str] = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            out.append(r"(?!\.)[^/]+(?:/(?!\.)[^/]+)*" if last else r"(?:(?!\.)[^/]+/)*")
            continue
        out.append(_segment_regex(seg) + ("" if last else "/"))
    return re.compile("".join(out))


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


def glob(workspace: Path, pattern: str) -> str:
    """Workspace-relative paths matching ``pattern``, sorted, dirs ending with '/'.

    Raises:
        ConfinementError: the pattern is absolute or climbs out of the workspace.
        ToolError: the pattern is empty.
    """
    if not isinstance(pattern, str) or not pattern.strip("/"):
        raise ToolError("glob pattern must be a non-empty relative pattern, e.g. '**/*.py'")
    if "\x00" in pattern or posixpath.isabs(pattern) or os.path.isabs(pattern):
        raise ConfinementError(
            f"glob pattern {pattern!r} is absolute; patterns are relative to the workspace",
            hint="e.g. 'src/**/*.py'",
        )
    norm = posixpath.normpath(pattern)
    if norm == ".." or norm.startswith("../"):
        raise ConfinementError(
            f"glob pattern {pattern!r} climbs out of the workspace", hint="e.g. 'src/**/*.py'"
        )
    parts = norm.split("/")
    literal = 0
    while literal < len(parts) - 1 and not _MAGIC.search(parts[literal]):
        literal += 1
    prefix = "/".join(parts[:literal])
    root = workspace_root(workspace)
    if not _MAGIC.search(norm):
        real = resolve_in_workspace(workspace, norm)
        return _glob_result([_mark(norm, str(real))] if os.path.exists(real) else [], pattern)
    base = resolve_in_workspace(workspace, prefix or ".")
    if not base.is_dir():
        return _glob_result([], pattern)
    regex = glob_regex(norm)
    want_hidden = any(p.startswith(".") for p in parts)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        if not want_hidden:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        sub = os.path.relpath(dirpath, base).replace(os.sep, "/")
        for name in dirnames + filenames:
            rel = posixpath.normpath(posixpath.join(prefix, sub, name))
            if not regex.fullmatch(rel):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not is_inside(root, os.path.realpath(full)):
                continue
            found.append(_mark(rel, full))
    return _glob_result(sorted(found), pattern)


def _mark(rel: str, full: str) -> str:
    return rel + "/" if os.path.isdir(full) else rel


def _glob_result(found: list[str], pattern: str) -> str:
    if not found:
        return f"no files match {pattern!r}"
    lines = found[:MAX_GLOB_RESULTS]
    if len(found) > MAX_GLOB_RESULTS:
        lines.append(f"... {len(found) - MAX_GLOB_RESULTS} more matches not shown; narrow it")
    return "\n".join(lines)


def grep(
    workspace: Path, pattern: str, path: str = ".", glob: str | None = None, *, max_matches: int
) -> str:
    """Lines matching the regex ``pattern`` as ``relpath:lineno:line``, at most ``max_matches``.

    Skips binary files (a NUL in the first 8 KiB), files over 5 MiB, VCS directories, and
    symlinks whose real path is outside the workspace; ``glob`` filters file names (or
    relative paths when it holds a '/').

    Raises:
        ConfinementError: ``path`` leaves the workspace.
        ToolError: a bad regex or a missing path.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(
            f"bad regex {pattern!r}: {exc}", hint="grep takes a Python regex; escape ( [ . etc."
        ) from exc
    real = resolve_in_workspace(workspace, path, must_exist=True)
    shown = display_path(path)
    root = workspace_root(workspace)
    name_filter = glob_regex(glob) if glob else None
    matches: list[str] = []
    more = 0
    skipped = 0
    for rel, full in _files(real, root, name_filter, by_path=bool(glob and "/" in glob)):
        lines = _text_lines(full)
        if lines is None:
            skipped += 1
            continue
        if not rel:
            where = shown  # path named a single file
        else:
            where = rel if shown == "." else posixpath.join(shown, rel)
        for lineno, line in enumerate(lines, start=1):
            if regex.search(line):
                if len(matches) < max_matches:
                    matches.append(f"{where}:{lineno}:{_cut(line)}")
                else:
                    more += 1
    if not matches:
        note = f" ({skipped} binary or large files skipped)" if skipped else ""
        return f"no matches for {pattern!r} in {shown}{note}"
    if more:
        matches.append(f"... {more} more matches not shown; narrow the pattern, path or glob")
    return "\n".join(matches)


def _files(
    real: Path, root: str, name_filter: re.Pattern[str] | None, by_path: bool
) -> Iterator[tuple[str, str]]:
    """(relative path from ``real``, full path) of each searchable file, sorted."""
    if not real.is_dir():
        yield "", str(real)
        return
    for dirpath, dirnames, filenames in os.walk(real, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        sub = os.path.relpath(dirpath, real).replace(os.sep, "/")
        for name in sorted(filenames):
            rel = posixpath.normpath(posixpath.join(sub, name))
            if name_filter is not None:
                target = rel if by_path else name
                if not name_filter.fullmatch(target):
                    continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not is_inside(root, os.path.realpath(full)):
                continue
            yield rel, full


def _text_lines(full: str) -> list[str] | None:
    try:
        if not os.path.isfile(full) or os.path.getsize(full) > MAX_GREP_FILE_BYTES:
            return None
        with open(full, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def _cut(line: str) -> str:
    return line if len(line) <= MAX_GREP_LINE_CHARS else line[:MAX_GREP_LINE_CHARS] + "..."


async def _glob(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(lambda: glob(ctx.workspace, args["pattern"]))


async def _grep(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: grep(
            ctx.workspace,
            args["pattern"],
            args.get("path", "."),
            args.get("glob"),
            max_matches=ctx.settings.grep_max_matches,
        ),
        abandon_on_cancel=True,
    )


GLOB = Tool(
    "glob",
    "Find files by glob pattern, e.g. '**/*.py'.",
    schema(["pattern"], pattern=prop("string", "glob relative to the workspace")),
    _glob,
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
)

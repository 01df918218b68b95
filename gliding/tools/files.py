"""File tools: read_file (paged by lines), write_file (atomic), edit_file (exact replace), list_dir.

Every path goes through resolve_in_workspace, so nothing outside the workspace is read or written.
Blocking file I/O runs in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import anyio.to_thread

from gliding.errors import ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema
from gliding.tools.workspace import display_path, resolve_in_workspace

CHUNK = 1 << 16  # characters read at a time
MAX_DIR_ENTRIES = 500


def read_file(
    workspace: Path, path: str, *, offset: int = 1, limit: int | None = None, page_lines: int = 200,
    page_chars: int = 1 << 20,
) -> str:
    """Lines ``offset``..``offset+limit-1`` (1-based) of a file, under a one-line header, whole:
    long lines are not cut. A page stops at ``page_chars`` characters (the line it stops in is
    kept up to there, with a notice); the file is read ``CHUNK`` characters at a time, so a
    huge line never loads into memory whole.

    Raises:
        ConfinementError: the path leaves the workspace.
        ToolError: missing file, a directory, or an offset/limit below 1 or past the end.
    """
    real = resolve_in_workspace(workspace, path, must_exist=True)
    shown = display_path(path)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory", hint="call list_dir to see its entries")
    limit = page_lines if limit is None else limit
    if offset < 1 or limit < 1:
        raise ToolError(f"offset and limit must be at least 1 (got offset={offset}, limit={limit})")
    page: list[str] = []
    kept = 0  # characters in the page
    last = offset - 1  # the last line (partly) in the page
    stopped: int | None = None  # the line the page size stopped in
    rest = 0  # characters of that line not in the page
    number = 1
    open_line = False  # the last piece read did not end its line
    try:
        with open(real, encoding="utf-8", errors="replace", newline="") as handle:
            while piece := handle.readline(CHUNK):
                if stopped == number:
                    rest += len(piece)
                elif stopped is None and offset <= number < offset + limit:
                    take = min(len(piece), page_chars - kept)
                    page.append(piece[:take])
                    kept += take
                    last = number
                    if take < len(piece):
                        stopped, rest = number, len(piece) - take
                open_line = not piece.endswith(("\n", "\r"))
                if not open_line:
                    number += 1
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    total = number if open_line else number - 1
    if total == 0:
        return f"{shown} is empty (0 lines)"
    if offset > total:
        raise ToolError(
            f"offset {offset} is past the end of {shown} ({total} lines)",
            hint=f"call read_file with an offset from 1 to {total}",
        )
    parts = [f"{shown} lines {offset}-{last} of {total}\n", *page]
    if stopped is not None:
        parts.append(f"\n[page size reached (tools.read_page_chars = {page_chars}) in line "
                     f"{stopped}: {rest} more characters of it not shown; bash (cut -c, head -c) "
                     "reads them]\n")
    if last < total:
        if not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(
            f"... {total - last} more line{'s' if total - last > 1 else ''}; "
            f"call read_file with offset={last + 1}"
        )
    return "".join(parts)


def write_atomic(real: Path, data: bytes) -> None:
    """Write ``data`` to ``real`` through a temp file in the same directory and os.replace.

    Keeps the permission bits of a file it replaces; new files get 0o644.
    """
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(workspace: Path, path: str, content: str) -> str:
    """Create or overwrite ``path`` with ``content`` as UTF-8, creating parent directories.

    Raises:
        ConfinementError: the path leaves the workspace.
        ToolError: the path is a directory or the write failed.
    """
    real = resolve_in_workspace(workspace, path)
    shown = display_path(path)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory; give a file path")
    data = content.encode("utf-8")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(real, data)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return f"wrote {len(data)} bytes to {shown}"


def edit_file(workspace: Path, path: str, old: str, new: str, *, replace_all: bool = False) -> str:
    """Replace the exact text ``old`` by ``new``; ``old`` must occur once unless ``replace_all``.

    Raises:
        ConfinementError: the path leaves the workspace.
        ToolError: missing file, not UTF-8, empty ``old``, or ``old`` found 0 or several times.
    """
    real = resolve_in_workspace(workspace, path, must_exist=True)
    shown = display_path(path)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory; give a file path")
    if old == "":
        raise ToolError("old must not be empty", hint="to create a file use write_file")
    try:
        text = real.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown} is not UTF-8 text; edit_file cannot change it") from exc
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old text found 0 times in {shown}",
            hint="read_file to see the current text; old must match exactly, whitespace included",
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old text found {count} times in {shown}; it must occur exactly once",
            hint="include more surrounding lines in old, or set replace_all=true",
        )
    try:
        write_atomic(real, text.replace(old, new).encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return f"replaced {count} occurrence{'s' if count > 1 else ''} in {shown}"


def list_dir(workspace: Path, path: str = ".") -> str:
    """Sorted entries of a directory, one a line: dirs end with '/', symlinks with '@'.

    Raises:
        ConfinementError: the path leaves the workspace.
        ToolError: missing path or not a directory.
    """
    real = resolve_in_workspace(workspace, path, must_exist=True)
    shown = display_path(path)
    if not real.is_dir():
        raise ToolError(f"{shown} is not a directory", hint="call read_file to read a file")
    try:
        with os.scandir(real) as it:
            names = sorted(_entry_name(e) for e in it)
    except OSError as exc:
        raise ToolError(f"cannot list {shown}: {exc.strerror or exc}") from exc
    if not names:
        return f"{shown}/ is empty"
    lines = names[:MAX_DIR_ENTRIES]
    if len(names) > MAX_DIR_ENTRIES:
        lines.append(f"... {len(names) - MAX_DIR_ENTRIES} more entries not shown; use glob")
    return "\n".join(lines)


def _entry_name(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return entry.name + "@"
    if entry.is_dir(follow_symlinks=False):
        return entry.name + "/"
    return entry.name


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: read_file(
            ctx.workspace,
            args["path"],
            offset=args.get("offset", 1),
            limit=args.get("limit"),
            page_lines=ctx.settings.read_page_lines,
            page_chars=ctx.settings.read_page_chars,
        )
    )


async def _write_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: write_file(ctx.workspace, args["path"], args["content"])
    )


async def _edit_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: edit_file(
            ctx.workspace,
            args["path"],
            args["old"],
            args["new"],
            replace_all=args.get("replace_all", False),
        )
    )


async def _list_dir(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(lambda: list_dir(ctx.workspace, args.get("path", ".")))


_PATH = prop("string", "path relative to the workspace")

READ_FILE = Tool(
    "read_file",
    "Read a text file, a page of lines at a time.",
    schema(
        ["path"],
        path=_PATH,
        offset=prop("integer", "first line, 1-based (default 1)"),
        limit=prop("integer", "number of lines (default one page)"),
    ),
    _read_file,
)
WRITE_FILE = Tool(
    "write_file",
    "Create or overwrite a file with exactly this content.",
    schema(["path", "content"], path=_PATH, content=prop("string", "the whole new file text")),
    _write_file,
)
EDIT_FILE = Tool(
    "edit_file",
    "Replace exact text in a file; old must occur once unless replace_all.",
    schema(
        ["path", "old", "new"],
        path=_PATH,
        old=prop("string", "exact text to replace"),
        new=prop("string", "replacement text"),
        replace_all=prop("boolean", "replace every occurrence (default false)"),
    ),
    _edit_file,
    idempotent=False,
)
LIST_DIR = Tool(
    "list_dir",
    "List a directory; dirs end with '/'.",
    schema(path=prop("string", "directory relative to the workspace (default '.')")),
    _list_dir,
)

"""File tools: read_file (paged by lines), write_file (atomic), edit_file (exact replace), list_dir.

Every path is opened through ``workspace.locate`` / ``open_regular``: walked from the workspace
root without following any link out, so a symlink swapped in mid-call cannot leak a read or
land a write outside, and only regular files are read (a FIFO is refused, not waited on).
The walk's guard (``protected.tool_guard``, from the job's sandbox) refuses the data directory
to every tool and the workspace's git directory to the ones that write.
Writes go to a temp file created in the located directory and renamed over the name there.
Blocking file I/O runs in a worker thread that is waited for, not abandoned: the work stops
at the call's deadline itself (TimeoutError), on the real clock, so a write is never left
running behind an answer and a test's virtual clock cannot cut it short. A file too large to
count (``MAX_COUNT_BYTES``, e.g. a 20 GB sparse file) is paged without reading past the page.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import anyio.to_thread

from gliding.errors import ToolError
from gliding.tools.base import CALL_TIMEOUT_S, Tool, ToolContext, check_deadline, prop, schema
from gliding.tools.protected import context_guard
from gliding.tools.workspace import Guard, display_path, locate, open_regular

CHUNK = 1 << 16  # characters read at a time
MAX_DIR_ENTRIES = 500
MAX_COUNT_BYTES = 64 << 20  # read_file counts the lines of files up to this size, not past it
MAX_EDIT_BYTES = 16 << 20  # edit_file holds the file in memory twice


def read_file(
    workspace: Path, path: str, *, offset: int = 1, limit: int | None = None, page_lines: int = 200,
    page_chars: int = 1 << 20, deadline: float | None = None, guard: Guard | None = None,
) -> str:
    """Lines ``offset``..``offset+limit-1`` (1-based) of a file, under a one-line header, whole:
    long lines are not cut. A page stops at ``page_chars`` characters (the line it stops in is
    kept up to there, with a notice); the file is read ``CHUNK`` characters at a time, so a
    huge line never loads into memory whole. The header counts the file's lines, except in a
    file over ``MAX_COUNT_BYTES``: that one is read only up to the end of the page.

    Raises:
        ConfinementError: the path leaves the workspace or ``guard`` refuses it, or the file
            has several hard links.
        ToolError: missing file, a directory or other non-regular file, or an offset/limit
            below 1 or past the end.
        TimeoutError: ``deadline`` passed (reaching a far offset of a huge file).
    """
    shown = display_path(path)
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
    with open_regular(workspace, path, guard) as found:
        assert found.fd is not None and found.st is not None  # open_regular says so
        size = found.st.st_size
        counts = size <= MAX_COUNT_BYTES
        whole = True  # read to the end
        try:
            with open(found.fd, encoding="utf-8", errors="replace", newline="",
                      closefd=False) as handle:
                while piece := handle.readline(CHUNK):
                    check_deadline(deadline)
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
                    if not counts and (stopped is not None or number >= offset + limit):
                        whole = not handle.read(1)
                        break
        except TimeoutError:  # an OSError too, but the deadline, not a failed read
            raise
        except OSError as exc:
            raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if not whole:
        return _uncounted_page(shown, size, page, offset, last, stopped, page_chars)
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


def _uncounted_page(shown: str, size: int, page: list[str], offset: int, last: int,
                    stopped: int | None, page_chars: int) -> str:
    """A page of a file too large to count, read only up to the page's end: more follows."""
    parts = [f"{shown} lines {offset}-{last} (a file of {size} bytes: too large to count its "
             "lines, so only this page was read)\n", *page]
    if stopped is not None:
        parts.append(f"\n[page size reached (tools.read_page_chars = {page_chars}) in line "
                     f"{stopped}: the rest of it is not shown; bash (cut -c, head -c) reads it]")
    if not parts[-1].endswith("\n"):
        parts.append("\n")
    parts.append(f"... more lines follow; call read_file with offset={last + 1}")
    return "".join(parts)


def write_atomic(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``name`` in the directory ``dir_fd`` through a temp file there and a
    rename, so readers see the old or the new file, never half of one; the rename replaces
    whatever entry ``name`` is by then (a symlink swapped in included), never what it points to.
    """
    tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file(workspace: Path, path: str, content: str, *, guard: Guard | None = None) -> str:
    """Create or overwrite ``path`` with ``content`` as UTF-8, creating parent directories;
    a replaced file keeps its permission bits, a new one gets 0o644.

    Raises:
        ConfinementError: the path leaves the workspace, or ``guard`` refuses it (nothing is
            made then, not even a parent directory).
        ToolError: the path is a directory or the write failed.
    """
    shown = display_path(path)
    data = content.encode("utf-8")
    try:
        with locate(workspace, path, make_dirs=True, guard=guard) as found:
            if not found.name or found.is_dir:
                raise ToolError(f"{shown} is a directory; give a file path")
            st, mode = found.st, 0o644
            if st is not None and stat.S_ISREG(st.st_mode):
                mode = stat.S_IMODE(st.st_mode)  # a replaced file keeps its permission bits
            write_atomic(found.dir_fd, found.name, data, mode)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return f"wrote {len(data)} bytes to {shown}"


def edit_file(workspace: Path, path: str, old: str, new: str, *, replace_all: bool = False,
              deadline: float | None = None, guard: Guard | None = None) -> str:
    """Replace the exact text ``old`` by ``new``; ``old`` must occur once unless ``replace_all``.

    Raises:
        ConfinementError: the path leaves the workspace or ``guard`` refuses it, or the file
            has several hard links.
        ToolError: missing file, not a regular file, over ``MAX_EDIT_BYTES``, not UTF-8, empty
            ``old``, or ``old`` found 0 or several times.
        TimeoutError: ``deadline`` passed while the file was read.
    """
    shown = display_path(path)
    if old == "":
        raise ToolError("old must not be empty", hint="to create a file use write_file")
    with open_regular(workspace, path, guard) as found:
        assert found.fd is not None and found.st is not None  # open_regular says so
        if found.st.st_size > MAX_EDIT_BYTES:
            raise ToolError(
                f"{shown} has {found.st.st_size} bytes, too large for edit_file "
                f"(at most {MAX_EDIT_BYTES})", hint="change it with bash (sed -i, a script)")
        try:
            raw = _read_all(found.fd, deadline)
        except TimeoutError:  # an OSError too, but the deadline, not a failed read
            raise
        except OSError as exc:
            raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{shown} is not UTF-8 text; edit_file cannot change it") from exc
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old text found 0 times in {shown}",
                hint="read_file to see the current text; old must match exactly, "
                     "whitespace included",
            )
        if count > 1 and not replace_all:
            raise ToolError(
                f"old text found {count} times in {shown}; it must occur exactly once",
                hint="include more surrounding lines in old, or set replace_all=true",
            )
        try:
            write_atomic(found.dir_fd, found.name, text.replace(old, new).encode("utf-8"),
                         stat.S_IMODE(found.st.st_mode))
        except OSError as exc:
            raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return f"replaced {count} occurrence{'s' if count > 1 else ''} in {shown}"


def _read_all(fd: int, deadline: float | None) -> bytes:
    """The rest of the regular file ``fd``, ``CHUNK`` bytes at a time."""
    pieces = []
    while piece := os.read(fd, CHUNK):
        check_deadline(deadline)
        pieces.append(piece)
    return b"".join(pieces)


def list_dir(workspace: Path, path: str = ".", *, deadline: float | None = None,
             guard: Guard | None = None) -> str:
    """Sorted entries of a directory, one a line: dirs end with '/', symlinks with '@'.

    Raises:
        ConfinementError: the path leaves the workspace, or ``guard`` refuses it.
        ToolError: missing path or not a directory.
        TimeoutError: ``deadline`` passed (a directory of millions of entries).
    """
    shown = display_path(path)
    with locate(workspace, path, guard=guard) as found:
        if found.st is None:
            raise ToolError(f"no such file: {shown}",
                            hint="call list_dir or glob to see what exists")
        if not found.is_dir:
            raise ToolError(f"{shown} is not a directory", hint="call read_file to read a file")
        if found.fd is None:
            raise ToolError(f"cannot list {shown}: permission denied")
        names = []
        try:
            with os.scandir(found.fd) as it:
                for entry in it:
                    names.append(_entry_name(entry))
                    if len(names) % 1000 == 0:
                        check_deadline(deadline)
        except TimeoutError:  # an OSError too, but the deadline, not a failed listing
            raise
        except OSError as exc:
            raise ToolError(f"cannot list {shown}: {exc.strerror or exc}") from exc
    names.sort()
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
            deadline=ctx.deadline,
            guard=context_guard(ctx, write=False),
        )
    )


async def _write_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: write_file(ctx.workspace, args["path"], args["content"],
                           guard=context_guard(ctx, write=True))
    )


async def _edit_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: edit_file(
            ctx.workspace,
            args["path"],
            args["old"],
            args["new"],
            replace_all=args.get("replace_all", False),
            deadline=ctx.deadline,
            guard=context_guard(ctx, write=True),
        )
    )


async def _list_dir(args: dict[str, Any], ctx: ToolContext) -> str:
    return await anyio.to_thread.run_sync(
        lambda: list_dir(ctx.workspace, args.get("path", "."), deadline=ctx.deadline,
                         guard=context_guard(ctx, write=False))
    )


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
    timeout_s=CALL_TIMEOUT_S,
)
WRITE_FILE = Tool(
    "write_file",
    "Create or overwrite a file with exactly this content.",
    schema(["path", "content"], path=_PATH, content=prop("string", "the whole new file text")),
    _write_file,
    timeout_s=CALL_TIMEOUT_S,
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
    timeout_s=CALL_TIMEOUT_S,
)
LIST_DIR = Tool(
    "list_dir",
    "List a directory; dirs end with '/'.",
    schema(path=prop("string", "directory relative to the workspace (default '.')")),
    _list_dir,
    timeout_s=CALL_TIMEOUT_S,
)

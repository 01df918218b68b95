"""Workspace confinement: turn a model-supplied relative path into a real path inside the workspace.

Symlinks are followed (os.path.realpath) before the check, so a link anywhere in the path —
the last component or a parent directory — that points outside the workspace is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from gliding.errors import ConfinementError, ToolError

_HINT = "use a path relative to the workspace root, e.g. 'src/main.py'"


def workspace_root(workspace: Path) -> str:
    """The real path of the workspace, as a string without a trailing separator."""
    return os.path.realpath(os.fspath(workspace))


def is_inside(root: str, real: str) -> bool:
    """True when the real path ``real`` is ``root`` or lies below it (both already realpath'd)."""
    return real == root or os.path.commonpath([root, real]) == root


def resolve_in_workspace(workspace: Path, rel: str, *, must_exist: bool = False) -> Path:
    """The real path of ``rel`` inside ``workspace``.

    Raises:
        ConfinementError: ``rel`` is not a string, holds a NUL byte, is absolute, or resolves
            (after following every symlink) to a place outside the workspace.
        ToolError: ``must_exist`` and nothing exists at the path.
    """
    if not isinstance(rel, str):
        raise ConfinementError(
            f"path must be a string, got {type(rel).__name__}: {rel!r}", hint=_HINT
        )
    if "\x00" in rel:
        raise ConfinementError(f"path {rel!r} contains a NUL byte", hint=_HINT)
    root = workspace_root(workspace)
    if os.path.isabs(rel):
        raise ConfinementError(
            f"path {rel!r} is absolute; tools only reach files inside the workspace {root}",
            hint=_HINT,
        )
    real = os.path.realpath(os.path.join(root, rel or "."))
    if not is_inside(root, real):
        raise ConfinementError(
            f"path {rel!r} resolves to {real}, outside the workspace {root}",
            hint=f"{_HINT}; '..' and symlinks may not leave the workspace",
        )
    if must_exist and not os.path.exists(real):
        raise ToolError(
            f"no such file: {rel}", hint="call list_dir or glob to see what exists"
        )
    return Path(real)


def display_path(rel: str) -> str:
    """How a path the model gave is shown back to it: normalised, with '/' separators."""
    return os.path.normpath(rel or ".").replace(os.sep, "/")

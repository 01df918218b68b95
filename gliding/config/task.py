"""Task files (task.yaml): loading and validation with line numbers, and the ``Task`` value.

A task file says what to achieve and within which limits::

    goal: Create hello.txt containing exactly "Hello, World!"   # required
    workspace: workspace        # default "workspace", relative to the task file's directory
    model: local                # default: whatever settings / --model say
    pipeline: auto              # or exploratory, or a list of roles, e.g. [PA, DA, CA]
    budgets:
      turns: 6                  # every role, or {PA: 2, DA: 6}; a role left out keeps the
                                # max_turns of its role file (roles/<ROLE>.yaml)
      prompt_tokens: 200000     # whole job, or per role: {DA: 150000, CA: 20000}
      completion_tokens: 20000  # whole job, or per role
      cost_usd: 1.0             # whole job, or per role
      wall_time_s: 900          # whole job
    checks:
      - file_exists: hello.txt
      - file_contains: {path: hello.txt, text: "Hello, World!"}
      - command: "test -s hello.txt"      # or {run: "...", timeout_s: 30}
    venv: /srv/venvs/app        # its commands' Python; mounts: [...] more read-only paths;
                                # both only where the host's tools.toolchain.allow admits them
    git_writes: false           # true: its tools may change the workspace's .git directory

``load_task`` reads and validates one against the file's schema (the pydantic ``*Spec``
models of ``task_schema.py``: the edge) and the workspace rule (``workspace_rule.py``);
``Task`` is the frozen value the rest of Gliding uses, and ``task_record`` /
``task_from_record`` carry it in a job's archive and over the bus. Every problem is a
``TaskFileError`` naming the file, the field and its line. Loading never creates or writes
anything, not even the workspace. The format is documented in docs/config.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from gliding.config.settings import ApprovalPolicy, HookSettings, MCPServerSettings
from gliding.config.task_schema import TaskSpec, kind_of
from gliding.config.workspace_rule import WORKSPACE_HINT, workspace_refusal
from gliding.config.yamlsource import (
    USER_FILE_MAX_BYTES,
    LineMap,
    describe_validation_error,
    format_key_path,
    line_for,
    load_yaml_with_lines,
    nul_byte_at,
    read_yaml_text,
    shown,
)
from gliding.core.checks import Check, CommandSucceeds, FileContains, FileExists
from gliding.errors import TaskFileError

_HINT = "see docs/config.md, section 'Task files'"


@dataclass(frozen=True)
class Task:
    """A validated task file: what to achieve, where, and within which budgets."""

    goal: str
    workspace: Path  # absolute and resolved; may not exist yet
    model: str | None  # None: settings or --model decide
    pipeline: Literal["auto", "exploratory"] | tuple[str, ...]
    turns: dict[str, int]  # the roles the task file caps; the others keep their role file's
    prompt_tokens: int | dict[str, int] | None  # a number for the job, or per role
    cost_usd: float | dict[str, float] | None
    wall_time_s: float | None
    checks: tuple[Check, ...]
    source: Path  # the task file, absolute
    completion_tokens: int | dict[str, int] | None = None
    network: bool = False  # its sandboxed commands may use the network
    # MCP servers of this task (docs/mcp.md), on top of settings.mcp.servers
    mcp_servers: dict[str, MCPServerSettings] = field(default_factory=dict)
    # role -> tool groups it gets in this task besides its role file's ({PA: [web]})
    tool_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hooks: tuple[HookSettings, ...] = ()  # the task's own (sandboxed; run where allowed)
    # a virtual environment and more read-only paths for its sandboxed commands, absolute;
    # a host mounts them only where its tools.toolchain.allow admits them (docs/tools.md)
    venv: Path | None = None
    mounts: tuple[Path, ...] = ()
    # its tools may change the git directory the workspace has when the job starts (hooks and
    # config run on the host at the user's next git command); else it is read-only to them
    git_writes: bool = False
    approvals: ApprovalPolicy = ApprovalPolicy()  # the task's own, on top of the host's


def load_task(path: Path) -> Task:
    """Read and validate the task file at ``path``; create or write nothing.

    Raises:
        TaskFileError: the file is missing, a directory, larger than 256 KiB, not UTF-8,
            empty, not YAML, not a mapping, or does not validate; or its workspace exists and
            is not a directory, or is a directory no job may have (``workspace_refusal``;
            a home's dot-directories are refused when the job starts, by the host's setting).
            The message names the file, the field and its line.
    """
    path = Path(path)
    text = read_yaml_text(path, what="task file", error=TaskFileError,
                          max_bytes=USER_FILE_MAX_BYTES)
    return load_task_text(text, str(path), path.parent)


def load_task_text(text: str, source: str, base_dir: Path) -> Task:
    """Validate the text of a task file named ``source`` (how messages name it, e.g. a file
    a client read), its relative workspace taken from ``base_dir``; create or write nothing.
    ``Task.source`` is ``base_dir / <source's file name>``.

    Raises:
        TaskFileError: the text is larger than 256 KiB, or as ``load_task`` says (empty,
            not YAML, not a mapping, does not validate, a workspace no job may have); the
            message names ``source``, the field and its line.
    """
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > USER_FILE_MAX_BYTES:
        raise TaskFileError(f"{source}: the task file is too large ({size} bytes); a task "
                            f"file may be at most 256 KiB ({USER_FILE_MAX_BYTES} bytes)")
    path = Path(base_dir) / (Path(source).name or "task.yaml")
    data, lines = load_yaml_with_lines(text, source, error=TaskFileError)
    if data is None:
        raise TaskFileError(
            f"{source}: the task file is empty", hint="write at least: goal: <what to achieve>"
        )
    if not isinstance(data, dict):
        raise TaskFileError(
            f"{source}:{lines[()]}: the task file must be a mapping of fields "
            f"(goal, workspace, ...), not a {kind_of(data)}",
            hint=_HINT,
        )
    _refuse_foreign(data, source, lines)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, source, lines, model=TaskSpec)
        raise TaskFileError(message, hint=_HINT) from exc

    line = lines.get(("workspace",), lines[()])
    try:
        workspace = (path.parent / Path(spec.workspace).expanduser()).resolve()
        existing = next(p for p in (workspace, *workspace.parents) if p.exists())
        is_file = not existing.is_dir()
    except (OSError, RuntimeError, ValueError) as exc:  # no such ~user, a symlink loop, no
        raise TaskFileError(                                # permission, a NUL in base_dir
            f"{source}:{line}: workspace: cannot use {shown(spec.workspace)}: {exc}"
        ) from exc
    if is_file:
        raise TaskFileError(
            f"{source}:{line}: workspace: {existing} exists and is not a directory",
            hint="point workspace at a directory, or at a path that does not exist yet",
        )
    # a home's dot-directories: the host's tools.allow_home_dot_workspaces decides, when the
    # job is queued or starts (compose.refuse_workspace), before anything is written
    refused = workspace_refusal(workspace, allow_home_dot_dirs=True)
    if refused:
        raise TaskFileError(f"{source}:{line}: workspace: {shown(spec.workspace)} is {workspace}"
                            f", {refused}", hint=WORKSPACE_HINT)
    turns = spec.budgets.turns
    venv, mounts = _toolchain_paths(spec, path.parent, source, lines)
    return Task(
        goal=spec.goal,
        workspace=workspace,
        model=spec.model,
        pipeline=spec.pipeline,
        turns={role: n for role, n in turns.items() if n is not None},
        prompt_tokens=_plain(spec.budgets.prompt_tokens),
        completion_tokens=_plain(spec.budgets.completion_tokens),
        cost_usd=_plain(spec.budgets.cost_usd),
        wall_time_s=spec.budgets.wall_time_s,
        checks=tuple(check.to_check() for check in spec.checks),
        source=path.resolve(),
        network=spec.network,
        mcp_servers=dict(spec.mcp_servers),
        tool_groups=dict(spec.tool_groups),
        hooks=spec.hooks,
        venv=venv,
        mounts=mounts,
        git_writes=spec.git_writes,
        approvals=spec.approvals,
    )


def _refuse_foreign(data: dict[Any, Any], source: str, lines: LineMap) -> None:
    """Refuse a mapping that is no task file (none of its keys is a task field) without
    quoting it: a path given to a daemon or an MCP server may name any file it can read
    (``/etc/shadow``), and its content must not come back in the error. Refuse a NUL byte
    (no path or command can hold one).

    Raises:
        TaskFileError: naming the line (and, for a NUL byte, the field), never the content.
    """
    if not any(isinstance(key, str) and key in TaskSpec.model_fields for key in data):
        raise TaskFileError(f"{source}:{lines[()]}: not a task file: none of its keys is a "
                            "field of one (goal, workspace, model, pipeline, budgets, checks, "
                            "...)", hint=_HINT)
    nul = nul_byte_at(data)
    if nul is not None:
        raise TaskFileError(f"{source}:{line_for(nul, lines)}: {format_key_path(nul)}: a NUL "
                            "byte (\\0) is not allowed in a task file", hint=_HINT)


def _toolchain_paths(spec: TaskSpec, base: Path, source: str, lines: LineMap
                     ) -> tuple[Path | None, tuple[Path, ...]]:
    """``venv`` and ``mounts`` absolute: relative to the task file's directory, ``~``
    expanded. Symlinks are followed, and the host's allow list applied, when the job starts
    on the host that runs it (``gliding.tools.toolchain``)."""
    def absolute(key: tuple[Any, ...], given: str) -> Path:
        try:
            return Path(os.path.normpath(base.resolve() / Path(given).expanduser()))
        except (OSError, RuntimeError, ValueError) as exc:  # no such ~user, a NUL byte
            where = ".".join(str(k) if isinstance(k, str) else f"[{k}]" for k in key)
            raise TaskFileError(f"{source}:{lines.get(key, lines[()])}: "
                                f"{where.replace('.[', '[')}: cannot use {shown(given)}: "
                                f"{exc}") from exc

    venv = None if spec.venv is None else absolute(("venv",), spec.venv)
    return venv, tuple(absolute(("mounts", i), m) for i, m in enumerate(spec.mounts))


def _plain(value: int | float | dict[str, Any] | None) -> Any:
    """A budget as ``Task`` holds it: a number, a dict of the roles given, or None."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value


def task_record(task: Task) -> dict[str, Any]:
    """``task`` as JSON values (kept in the job's archive so a resumed job needs no file)."""
    return {
        "goal": task.goal, "workspace": str(task.workspace), "model": task.model,
        "pipeline": task.pipeline if isinstance(task.pipeline, str) else list(task.pipeline),
        "turns": dict(task.turns), "prompt_tokens": task.prompt_tokens,
        "completion_tokens": task.completion_tokens, "cost_usd": task.cost_usd,
        "wall_time_s": task.wall_time_s, "source": str(task.source),
        "checks": [_check_record(c) for c in task.checks], "network": task.network,
        "mcp_servers": {name: server.model_dump(mode="json")
                        for name, server in task.mcp_servers.items()},
        "tool_groups": {role: list(groups) for role, groups in task.tool_groups.items()},
        "venv": None if task.venv is None else str(task.venv),
        "mounts": [str(m) for m in task.mounts],
        "git_writes": task.git_writes,
        "hooks": [hook.model_dump(mode="json") for hook in task.hooks],
        "approvals": task.approvals.model_dump(mode="json"),
    }


def task_from_record(data: dict[str, Any]) -> Task:
    """The Task ``task_record`` wrote. Raises TaskFileError when the record is damaged."""
    try:
        pipeline = data["pipeline"]
        return Task(
            goal=str(data["goal"]), workspace=Path(data["workspace"]), model=data.get("model"),
            pipeline=pipeline if pipeline in ("auto", "exploratory") else tuple(pipeline),
            turns={str(k): int(v) for k, v in (data.get("turns") or {}).items()},
            prompt_tokens=data.get("prompt_tokens"), cost_usd=data.get("cost_usd"),
            completion_tokens=data.get("completion_tokens"),
            wall_time_s=data.get("wall_time_s"), source=Path(data["source"]),
            checks=tuple(_check_from(c) for c in data.get("checks") or ()),
            network=bool(data.get("network", False)),
            mcp_servers={str(name): MCPServerSettings.model_validate(server)
                         for name, server in (data.get("mcp_servers") or {}).items()},
            tool_groups={str(role): tuple(str(g) for g in groups)
                         for role, groups in (data.get("tool_groups") or {}).items()},
            venv=_record_path("venv", data["venv"]) if data.get("venv") else None,
            mounts=tuple(_record_path(f"mounts[{i}]", m)
                         for i, m in enumerate(data.get("mounts") or ())),
            git_writes=data.get("git_writes", False) is True,
            # a record may come over the bus: a task's hooks are sandboxed whatever it says
            hooks=tuple(HookSettings.model_validate({**hook, "sandbox": True})
                        for hook in data.get("hooks") or ()),
            approvals=ApprovalPolicy.model_validate(data.get("approvals") or {}))
    except (KeyError, TypeError, ValueError) as exc:  # ValidationError is a ValueError
        raise TaskFileError(f"the job's archived task record is damaged: {exc}") from exc


def _record_path(key: str, value: Any) -> Path:
    """A toolchain path of a task record (a broker's or worker's, so untrusted): absolute,
    normalized, without ``..`` (``..`` would walk out of what the host allows).

    Raises:
        TaskFileError: the path is relative or has a ``..`` component.
    """
    text = str(value)
    if not os.path.isabs(text) or ".." in Path(text).parts:
        raise TaskFileError(f"the job's task record is refused: {key}: {text} is not an "
                            "absolute path without '..'")
    return Path(os.path.normpath(text))


def _check_record(check: Check) -> dict[str, Any]:
    if isinstance(check, FileExists):
        return {"kind": check.kind, "path": check.path}
    if isinstance(check, FileContains):
        return {"kind": check.kind, "path": check.path, "text": check.text}
    return {"kind": check.kind, "command": check.command, "timeout_s": check.timeout_s}


def _check_from(data: dict[str, Any]) -> Check:
    if data["kind"] == "file_exists":
        return FileExists(str(data["path"]))
    if data["kind"] == "file_contains":
        return FileContains(str(data["path"]), str(data["text"]))
    return CommandSucceeds(str(data["command"]), float(data["timeout_s"]))



"""Task files (task.yaml): their schema, validation with line numbers, and the ``Task`` value.

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

``load_task`` reads and validates one; the pydantic ``*Spec`` models are the file's schema (the
edge), ``Task`` is the frozen value the rest of Gliding uses. Every problem is a
``TaskFileError`` naming the file, the field and its line. Loading never creates or writes
anything, not even the workspace. The format is documented in docs/config.md.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gliding.config.settings import MCPServerSettings, mcp_server_names
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

AgentRole = Literal["PA", "DA", "CA", "AA"]
AGENT_ROLES: tuple[AgentRole, ...] = ("PA", "DA", "CA", "AA")
"""Plan, Do, Check and Act agents, in PDCA order."""

CHECK_KINDS = ("file_exists", "file_contains", "command")

_HINT = "see docs/config.md, section 'Task files'"
_ROLE_LIST = ", ".join(AGENT_ROLES)


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
    # a virtual environment and more read-only paths for its sandboxed commands, absolute;
    # a host mounts them only where its tools.toolchain.allow admits them (docs/tools.md)
    venv: Path | None = None
    mounts: tuple[Path, ...] = ()
    # its tools may change the git directory the workspace has when the job starts (hooks and
    # config run on the host at the user's next git command); else it is read-only to them
    git_writes: bool = False


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
            f"(goal, workspace, ...), not a {_kind(data)}",
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
        turns={role: n for role in AGENT_ROLES if (n := getattr(turns, role)) is not None},
        prompt_tokens=_plain(spec.budgets.prompt_tokens),
        completion_tokens=_plain(spec.budgets.completion_tokens),
        cost_usd=_plain(spec.budgets.cost_usd),
        wall_time_s=spec.budgets.wall_time_s,
        checks=tuple(check.to_check() for check in spec.checks),
        source=path.resolve(),
        network=spec.network,
        mcp_servers=dict(spec.mcp_servers),
        tool_groups=dict(spec.tool_groups),
        venv=venv,
        mounts=mounts,
        git_writes=spec.git_writes,
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


# --- where a job may work ----------------------------------------------------------------------

WORKSPACE_HINT = ("give the job a directory of its own, e.g. workspace: workspace "
                  "(next to the task file)")
HOME_DOT_HINT = (f"{WORKSPACE_HINT}; a host that means it sets "
                 "tools.allow_home_dot_workspaces: true (docs/config.md)")

SYSTEM_TREES = tuple(Path(p) for p in (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/System", "/Library", "/private/etc"))
"""Directories the system lives in: no workspace is one of them or inside one."""

SHARED_DIRS = tuple(Path(p) for p in (
    "/home", "/root", "/tmp", "/var", "/var/tmp", "/var/lib", "/var/log", "/var/cache",
    "/opt", "/srv", "/mnt", "/media", "/snap", "/Users", "/Volumes", "/Applications",
    "/private", "/private/tmp", "/private/var"))
"""Directories that hold everyone's files: a workspace may lie below one, not be one."""


HOMES_BELOW = (Path("/home"), Path("/Users"))
"""Directories whose children are home directories (``/home/<user>``)."""


def workspace_refusal(workspace: Path, *, home: Path | None = None,
                      data_dir: Path | None = None,
                      allow_home_dot_dirs: bool = False) -> str | None:
    """Why no job may work in ``workspace`` (absolute and resolved, symlinks followed), or None.

    The agents (and their commands, read-write) may change or delete anything in their
    workspace, so it may not be ``/``, a system directory or a directory inside one
    (``SYSTEM_TREES``), a directory everyone's files are in (``SHARED_DIRS``), the home
    directory (``home``, default: ``$HOME`` and the password database's, resolved) or a
    directory holding it, nor the data directory or a directory inside it (the archives; given
    by the job's runner). Unless ``allow_home_dot_dirs`` (``tools.allow_home_dot_workspaces``)
    it may not lie in a top-level dot-entry of a home directory either (``home_dot_dir``:
    ``~/.ssh``, ``~/.config``, ``~/.aws``, ...: credentials and configuration). A data
    directory inside the workspace is allowed: the sandbox and the file tools keep it out.
    """
    if workspace == Path(workspace.anchor):
        return "the root directory"
    for tree in SYSTEM_TREES:
        if workspace == tree or workspace.is_relative_to(tree):
            return f"a system directory ({tree})" if workspace == tree else (
                f"inside the system directory {tree}")
    if workspace in SHARED_DIRS:
        return "a directory shared by everyone's files"
    homes = (home,) if home is not None else _user_homes()
    for own in homes:
        if own == Path(own.anchor):
            continue
        if workspace == own:
            return "the home directory"
        if own.is_relative_to(workspace):
            return f"a directory that holds the home directory {own}"
    if data_dir is not None and (workspace == data_dir or workspace.is_relative_to(data_dir)):
        return f"inside the data directory {data_dir}, where the job archives are"
    dot = None if allow_home_dot_dirs else home_dot_dir(workspace, homes)
    if dot is not None:
        return (f"inside {dot}, a dot-directory of a home directory (credentials and "
                "configuration live there)")
    return None


def home_dot_dir(path: Path, homes: tuple[Path, ...]) -> Path | None:
    """The top-level dot-entry of a home directory that ``path`` is or lies in (``~/.ssh``,
    ``/home/bob/.config``), or None. Homes are ``homes``, ``/root`` and the child of
    ``/home`` or ``/Users`` that ``path`` lies in."""
    found = [*homes, Path("/root")]
    for parent in HOMES_BELOW:
        if path.is_relative_to(parent) and len(path.parts) > len(parent.parts):
            found.append(parent / path.parts[len(parent.parts)])
    for home in found:
        if home != Path(home.anchor) and path.is_relative_to(home) and path != home:
            top = path.parts[len(home.parts)]
            if top.startswith("."):
                return home / top
    return None


def _user_homes() -> tuple[Path, ...]:
    """This user's home directories, resolved: ``$HOME`` and the password database's."""
    found: list[Path] = []
    with contextlib.suppress(RuntimeError, OSError):  # no HOME and no passwd entry
        found.append(Path.home().resolve())
    with contextlib.suppress(ImportError, KeyError, OSError, RuntimeError):  # none for the uid
        import pwd  # noqa: PLC0415 - POSIX only

        found.append(Path(pwd.getpwuid(os.getuid()).pw_dir).resolve())
    return tuple(dict.fromkeys(h for h in found if h.is_absolute()))


def _plain(value: int | float | BaseModel | None) -> Any:
    """A budget as ``Task`` holds it: a number, a dict of the roles given, or None."""
    if isinstance(value, BaseModel):
        return {k: v for k, v in value.model_dump().items() if v is not None}
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
            git_writes=data.get("git_writes", False) is True)
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


# --- the schema: pydantic at the edge ---------------------------------------------------------


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid", message)


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _not_blank(value: str) -> str:
    if not value.strip():
        raise _invalid("must not be empty")
    return value.strip()


def _relative_path(value: str) -> str:
    """A check path: relative to the workspace and staying inside it."""
    if not value.strip():
        raise _invalid("must not be empty")
    if PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute():
        raise _invalid(f"must be relative to the workspace, not absolute: {shown(value)}")
    depth = 0
    for part in PurePosixPath(value.replace("\\", "/")).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise _invalid(f"must stay inside the workspace: {shown(value)} leads out of it")
    return value


NonBlank = Annotated[str, AfterValidator(_not_blank)]
CheckPath = Annotated[str, AfterValidator(_relative_path)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


MAX_TURNS = 10_000
"""Turns of one role and assignment, at most."""
MAX_TOKENS = 10**12
"""A token budget, at most (no job comes near it; larger numbers are typos)."""
MAX_COST_USD = 1_000_000.0
MAX_WALL_TIME_S = 30 * 86_400.0
MAX_CHECK_TIMEOUT_S = 86_400.0


class TurnsSpec(_Spec):
    """Turns per role; an int in the task file sets every role."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: int | None = Field(None, ge=1, le=MAX_TURNS)
    DA: int | None = Field(None, ge=1, le=MAX_TURNS)
    CA: int | None = Field(None, ge=1, le=MAX_TURNS)
    AA: int | None = Field(None, ge=1, le=MAX_TURNS)


class TokensPerRole(_Spec):
    """A token budget per role; the roles left out have none of their own."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: int | None = Field(None, ge=1, le=MAX_TOKENS)
    DA: int | None = Field(None, ge=1, le=MAX_TOKENS)
    CA: int | None = Field(None, ge=1, le=MAX_TOKENS)
    AA: int | None = Field(None, ge=1, le=MAX_TOKENS)


class CostPerRole(_Spec):
    """A cost budget per role (USD)."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: float | None = Field(None, ge=0, le=MAX_COST_USD)
    DA: float | None = Field(None, ge=0, le=MAX_COST_USD)
    CA: float | None = Field(None, ge=0, le=MAX_COST_USD)
    AA: float | None = Field(None, ge=0, le=MAX_COST_USD)


def _number(adapter: TypeAdapter[Any], value: Any, prefix: str) -> Any:
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        raise _invalid(f"{prefix}{exc.errors()[0]['msg']}, got {shown(value)}") from None


_TOKENS: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=1, le=MAX_TOKENS)])
_COST: TypeAdapter[float] = TypeAdapter(
    Annotated[float, Field(ge=0, le=MAX_COST_USD, allow_inf_nan=False)])


class BudgetsSpec(_Spec):
    turns: TurnsSpec = TurnsSpec()
    prompt_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | TokensPerRole | None = None
    completion_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | TokensPerRole | None = None
    cost_usd: Annotated[float, Field(ge=0, le=MAX_COST_USD)] | CostPerRole | None = None
    wall_time_s: float | None = Field(None, gt=0, le=MAX_WALL_TIME_S)

    @field_validator("prompt_tokens", "completion_tokens", "cost_usd", mode="before")
    @classmethod
    def _number_or_roles(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or isinstance(value, BaseModel):
            return value
        number = _COST if info.field_name == "cost_usd" else _TOKENS
        if isinstance(value, dict):  # per role: name the role and the value that is wrong
            for role, item in value.items():
                if role not in AGENT_ROLES:
                    raise _invalid(f"unknown role {shown(role)} (roles: {_ROLE_LIST})")
                if item is not None:
                    _number(number, item, f"{role}: ")
            return value
        return _number(number, value, "")

    @field_validator("turns", mode="before")
    @classmethod
    def _turns_for_every_role(cls, value: Any) -> Any:
        if value is None:
            return TurnsSpec()
        if isinstance(value, int) and not isinstance(value, bool):
            if not 1 <= value <= MAX_TURNS:
                raise _invalid(f"must be from 1 to {MAX_TURNS}, got {shown(value)}")
            return {role: value for role in AGENT_ROLES}
        if isinstance(value, dict | TurnsSpec):
            return value
        raise _invalid(
            f"must be a whole number (every role) or a mapping of role to number "
            f"like {{DA: 6, CA: 3}}, got a {_kind(value)}"
        )


class FileContainsSpec(_Spec):
    path: CheckPath
    text: str = Field(min_length=1)


class CommandSpec(_Spec):
    run: NonBlank
    timeout_s: float = Field(CommandSucceeds.timeout_s, gt=0, le=MAX_CHECK_TIMEOUT_S)


class CheckSpec(_Spec):
    """One check: exactly one of the keys below."""

    unknown_key_noun: ClassVar[str] = "check kind"

    file_exists: CheckPath | None = None
    file_contains: FileContainsSpec | None = None
    command: CommandSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _invalid(
                f"a check is a mapping with one of {', '.join(CHECK_KINDS)}, "
                f"got a {_kind(value)}: {shown(value)}"
            )
        kinds = [key for key in value if key in CHECK_KINDS]
        if len(kinds) > 1:
            raise _invalid(f"a check has exactly one kind, got {' and '.join(kinds)}")
        if not value:
            raise _invalid(f"empty check; give one of {', '.join(CHECK_KINDS)}")
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command_string(cls, value: Any) -> Any:
        return {"run": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _has_value(self) -> CheckSpec:
        if self.file_exists is None and self.file_contains is None and self.command is None:
            raise _invalid(f"a check needs a value for one of {', '.join(CHECK_KINDS)}")
        return self

    def to_check(self) -> Check:
        if self.file_exists is not None:
            return FileExists(path=self.file_exists)
        if self.file_contains is not None:
            return FileContains(path=self.file_contains.path, text=self.file_contains.text)
        assert self.command is not None  # _has_value
        return CommandSucceeds(command=self.command.run, timeout_s=self.command.timeout_s)


def _pipeline(value: Any) -> Literal["auto", "exploratory"] | tuple[str, ...]:
    if value is None or value == "auto":
        return "auto"
    if value == "exploratory":
        return "exploratory"
    if not isinstance(value, list):
        raise _invalid(
            "must be 'auto' or a list of roles like [PA, DA, CA] (or 'exploratory'), "
            f"got {shown(value)}"
        )
    if not value:
        raise _invalid("must not be an empty list; use 'auto' or list roles like [DA, CA]")
    for role in value:
        if role not in AGENT_ROLES:
            raise _invalid(f"unknown role {shown(role)} (roles: {_ROLE_LIST})")
    for role in AGENT_ROLES:
        if value.count(role) > 1:
            raise _invalid(f"role {role!r} appears more than once")
    if "DA" not in value:
        raise _invalid(f"must contain DA, the role that does the work; got {shown(value)}")
    return tuple(value)


class TaskSpec(_Spec):
    """The task file as written; ``null`` for an optional field means its default."""

    goal: NonBlank
    workspace: NonBlank = "workspace"
    model: NonBlank | None = None
    pipeline: Annotated[Any, BeforeValidator(_pipeline)] = "auto"
    budgets: BudgetsSpec = BudgetsSpec()
    checks: tuple[CheckSpec, ...] = ()
    network: bool = False  # bash and check commands may use the network (tools.network too)
    # name -> MCP server, the keys of settings mcp.servers.<name> (docs/mcp.md); a server of
    # the same name as a configured one replaces it for this task's jobs
    mcp_servers: dict[str, MCPServerSettings] = {}
    # role -> tool groups it gets in this task besides its role file's, e.g. {DA: [web]}
    tool_groups: dict[str, tuple[str, ...]] = {}
    # a virtual environment for its sandboxed commands, and more read-only paths; a host
    # mounts them only where its tools.toolchain.allow admits them
    venv: NonBlank | None = None
    mounts: tuple[NonBlank, ...] = ()
    # its tools may change the workspace's .git directory (else read-only: docs/tools.md)
    git_writes: bool = False

    @field_validator("mounts", mode="before")
    @classmethod
    def _mounts(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise _invalid(f"must be a list of paths, got a {_kind(value)}")
        return tuple(value)

    @field_validator("tool_groups", mode="before")
    @classmethod
    def _tool_groups(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _invalid("must be a mapping of role to a list of tool groups, e.g. "
                           f"{{DA: [web]}}, got a {_kind(value)}")
        out = {}
        for role, groups in value.items():
            if role not in AGENT_ROLES:
                raise _invalid(f"unknown role {shown(role)} (roles: {_ROLE_LIST})")
            listed = [groups] if isinstance(groups, str) else groups
            if not isinstance(listed, list) or not all(
                    isinstance(g, str) and g.strip() for g in listed):
                raise _invalid(f"{role}: must be a list of tool group names, e.g. [web]")
            out[role] = tuple(g.strip() for g in listed)
        return out

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _mcp_servers(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _invalid(f"must be a mapping of server name to server, got a {_kind(value)}")
        try:
            return mcp_server_names(value)
        except ValueError as exc:
            raise _invalid(str(exc)) from None

    @field_validator("workspace", "budgets", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            field = cls.model_fields[info.field_name or ""]
            return field.get_default(call_default_factory=True)
        return value

    @field_validator("checks", mode="before")
    @classmethod
    def _checks_list(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, list | tuple):
            return tuple(value)  # strict mode takes tuples only; YAML gives lists
        raise _invalid(f"must be a list of checks, got a {_kind(value)}")

"""Task files (task.yaml): their schema, validation with line numbers, and the ``Task`` value.

A task file says what to achieve and within which limits::

    goal: Create hello.txt containing exactly "Hello, World!"   # required
    workspace: workspace        # default "workspace", relative to the task file's directory
    model: local                # default: whatever settings / --model say
    pipeline: auto              # or a list of roles, e.g. [PA, DA, CA]; must contain DA
    budgets:
      turns: 6                  # every role, or {PA: 2, DA: 6, CA: 3, AA: 2}
      prompt_tokens: 200000     # whole job
      cost_usd: 1.0             # whole job
      wall_time_s: 900          # whole job
    checks:
      - file_exists: hello.txt
      - file_contains: {path: hello.txt, text: "Hello, World!"}
      - command: "test -s hello.txt"      # or {run: "...", timeout_s: 30}

``load_task`` reads and validates one; the pydantic ``*Spec`` models are the file's schema (the
edge), ``Task`` is the frozen value the rest of Gliding uses. Every problem is a
``TaskFileError`` naming the file, the field and its line. Loading never creates or writes
anything, not even the workspace. The format is documented in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gliding.config.yamlsource import (
    describe_validation_error,
    load_yaml_with_lines,
    read_yaml_text,
)
from gliding.core.checks import Check, CommandSucceeds, FileContains, FileExists
from gliding.errors import TaskFileError

AgentRole = Literal["PA", "DA", "CA", "AA"]
AGENT_ROLES: tuple[AgentRole, ...] = ("PA", "DA", "CA", "AA")
"""Plan, Do, Check and Act agents, in PDCA order."""

DEFAULT_TURNS: dict[str, int] = {"PA": 3, "DA": 6, "CA": 3, "AA": 2}
"""Turns per role when the task file does not say."""

CHECK_KINDS = ("file_exists", "file_contains", "command")

_HINT = "see docs/config.md, section 'Task files'"
_ROLE_LIST = ", ".join(AGENT_ROLES)


@dataclass(frozen=True)
class Task:
    """A validated task file: what to achieve, where, and within which budgets."""

    goal: str
    workspace: Path  # absolute and resolved; may not exist yet
    model: str | None  # None: settings or --model decide
    pipeline: Literal["auto"] | tuple[str, ...]
    turns: dict[str, int]  # every role in AGENT_ROLES
    prompt_tokens: int | None
    cost_usd: float | None
    wall_time_s: float | None
    checks: tuple[Check, ...]
    source: Path  # the task file, absolute


def load_task(path: Path) -> Task:
    """Read and validate the task file at ``path``; create or write nothing.

    Raises:
        TaskFileError: the file is missing, a directory, not UTF-8, empty, not YAML, not a
            mapping, or does not validate; or its workspace exists and is not a directory.
            The message names the file, the field and its line.
    """
    path = Path(path)
    source = str(path)
    text = read_yaml_text(path, what="task file", error=TaskFileError)
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
    except (OSError, RuntimeError) as exc:  # no such ~user, a symlink loop, no permission
        raise TaskFileError(
            f"{source}:{line}: workspace: cannot use {spec.workspace!r}: {exc}"
        ) from exc
    if is_file:
        raise TaskFileError(
            f"{source}:{line}: workspace: {existing} exists and is not a directory",
            hint="point workspace at a directory, or at a path that does not exist yet",
        )
    turns = spec.budgets.turns
    return Task(
        goal=spec.goal,
        workspace=workspace,
        model=spec.model,
        pipeline=spec.pipeline,
        turns={role: getattr(turns, role) for role in AGENT_ROLES},
        prompt_tokens=spec.budgets.prompt_tokens,
        cost_usd=spec.budgets.cost_usd,
        wall_time_s=spec.budgets.wall_time_s,
        checks=tuple(check.to_check() for check in spec.checks),
        source=path.resolve(),
    )


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
        raise _invalid(f"must be relative to the workspace, not absolute: {value!r}")
    depth = 0
    for part in PurePosixPath(value.replace("\\", "/")).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise _invalid(f"must stay inside the workspace: {value!r} leads out of it")
    return value


NonBlank = Annotated[str, AfterValidator(_not_blank)]
CheckPath = Annotated[str, AfterValidator(_relative_path)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class TurnsSpec(_Spec):
    """Turns per role; an int in the task file sets every role."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: int = Field(DEFAULT_TURNS["PA"], ge=1)
    DA: int = Field(DEFAULT_TURNS["DA"], ge=1)
    CA: int = Field(DEFAULT_TURNS["CA"], ge=1)
    AA: int = Field(DEFAULT_TURNS["AA"], ge=1)


class BudgetsSpec(_Spec):
    turns: TurnsSpec = TurnsSpec()
    prompt_tokens: int | None = Field(None, ge=1)
    cost_usd: float | None = Field(None, ge=0)
    wall_time_s: float | None = Field(None, gt=0)

    @field_validator("turns", mode="before")
    @classmethod
    def _turns_for_every_role(cls, value: Any) -> Any:
        if value is None:
            return TurnsSpec()
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise _invalid(f"must be at least 1, got {value}")
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
    timeout_s: float = Field(CommandSucceeds.timeout_s, gt=0)


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
                f"got a {_kind(value)}: {value!r}"
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


def _pipeline(value: Any) -> Literal["auto"] | tuple[str, ...]:
    if value is None or value == "auto":
        return "auto"
    if not isinstance(value, list):
        raise _invalid(
            f"must be 'auto' or a list of roles like [PA, DA, CA], got {value!r}"
        )
    if not value:
        raise _invalid("must not be an empty list; use 'auto' or list roles like [DA, CA]")
    for role in value:
        if role not in AGENT_ROLES:
            raise _invalid(f"unknown role {role!r} (roles: {_ROLE_LIST})")
    for role in AGENT_ROLES:
        if value.count(role) > 1:
            raise _invalid(f"role {role!r} appears more than once")
    if "DA" not in value:
        raise _invalid(f"must contain DA, the role that does the work; got {value!r}")
    return tuple(value)


class TaskSpec(_Spec):
    """The task file as written; ``null`` for an optional field means its default."""

    goal: NonBlank
    workspace: NonBlank = "workspace"
    model: NonBlank | None = None
    pipeline: Annotated[Any, BeforeValidator(_pipeline)] = "auto"
    budgets: BudgetsSpec = BudgetsSpec()
    checks: tuple[CheckSpec, ...] = ()

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

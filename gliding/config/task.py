"""Task files (task.yaml): their schema, validation with line numbers, and the ``Task`` value.

A task file says what to achieve and within which limits::

    goal: Create hello.txt containing exactly "Hello, World!"   # required
    workspace: workspace        # default "workspace", relative to the task file's directory
    model: local                # default: whatever settings / --model say
    pipeline: auto              # or a list of roles, e.g. [PA, DA, CA]; must contain DA
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
    TypeAdapter,
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
    turns: dict[str, int]  # the roles the task file caps; the others keep their role file's
    prompt_tokens: int | dict[str, int] | None  # a number for the job, or per role
    cost_usd: float | dict[str, float] | None
    wall_time_s: float | None
    checks: tuple[Check, ...]
    source: Path  # the task file, absolute
    completion_tokens: int | dict[str, int] | None = None


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
        turns={role: n for role in AGENT_ROLES if (n := getattr(turns, role)) is not None},
        prompt_tokens=_plain(spec.budgets.prompt_tokens),
        completion_tokens=_plain(spec.budgets.completion_tokens),
        cost_usd=_plain(spec.budgets.cost_usd),
        wall_time_s=spec.budgets.wall_time_s,
        checks=tuple(check.to_check() for check in spec.checks),
        source=path.resolve(),
    )


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
        "checks": [_check_record(c) for c in task.checks],
    }


def task_from_record(data: dict[str, Any]) -> Task:
    """The Task ``task_record`` wrote. Raises TaskFileError when the record is damaged."""
    try:
        pipeline = data["pipeline"]
        return Task(
            goal=str(data["goal"]), workspace=Path(data["workspace"]), model=data.get("model"),
            pipeline="auto" if pipeline == "auto" else tuple(pipeline),
            turns={str(k): int(v) for k, v in (data.get("turns") or {}).items()},
            prompt_tokens=data.get("prompt_tokens"), cost_usd=data.get("cost_usd"),
            completion_tokens=data.get("completion_tokens"),
            wall_time_s=data.get("wall_time_s"), source=Path(data["source"]),
            checks=tuple(_check_from(c) for c in data.get("checks") or ()))
    except (KeyError, TypeError, ValueError) as exc:
        raise TaskFileError(f"the job's archived task record is damaged: {exc}") from exc


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

    PA: int | None = Field(None, ge=1)
    DA: int | None = Field(None, ge=1)
    CA: int | None = Field(None, ge=1)
    AA: int | None = Field(None, ge=1)


class TokensPerRole(_Spec):
    """A token budget per role; the roles left out have none of their own."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: int | None = Field(None, ge=1)
    DA: int | None = Field(None, ge=1)
    CA: int | None = Field(None, ge=1)
    AA: int | None = Field(None, ge=1)


class CostPerRole(_Spec):
    """A cost budget per role (USD)."""

    unknown_key_noun: ClassVar[str] = "role"

    PA: float | None = Field(None, ge=0)
    DA: float | None = Field(None, ge=0)
    CA: float | None = Field(None, ge=0)
    AA: float | None = Field(None, ge=0)


def _number(adapter: TypeAdapter[Any], value: Any, prefix: str) -> Any:
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        raise _invalid(f"{prefix}{exc.errors()[0]['msg']}, got {value!r}") from None


_TOKENS: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=1)])
_COST: TypeAdapter[float] = TypeAdapter(Annotated[float, Field(ge=0, allow_inf_nan=False)])


class BudgetsSpec(_Spec):
    turns: TurnsSpec = TurnsSpec()
    prompt_tokens: Annotated[int, Field(ge=1)] | TokensPerRole | None = None
    completion_tokens: Annotated[int, Field(ge=1)] | TokensPerRole | None = None
    cost_usd: Annotated[float, Field(ge=0)] | CostPerRole | None = None
    wall_time_s: float | None = Field(None, gt=0)

    @field_validator("prompt_tokens", "completion_tokens", "cost_usd", mode="before")
    @classmethod
    def _number_or_roles(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or isinstance(value, BaseModel):
            return value
        number = _COST if info.field_name == "cost_usd" else _TOKENS
        if isinstance(value, dict):  # per role: name the role and the value that is wrong
            for role, item in value.items():
                if role not in AGENT_ROLES:
                    raise _invalid(f"unknown role {role!r} (roles: {_ROLE_LIST})")
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

"""The task file's schema: the pydantic ``*Spec`` models a task file is validated against.

``TaskSpec`` is the file as written (``BudgetsSpec``, ``CheckSpec`` and the rest its parts);
its validators refuse what no job could run (an unknown role, a pipeline without a role that
does the work, a check path that leads out of the workspace, a budget past ``MAX_*``) with a
message that names the value. This is pydantic at the edge: ``task.load_task_text`` turns a
``ValidationError`` into a ``TaskFileError`` with the field's line and builds the frozen
``Task`` from the spec; nothing past ``task.py`` sees these models.
"""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
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

from gliding.config.roles import RoleName, entry, pick, role_list, role_names
from gliding.config.settings import (
    ApprovalPolicy,
    HookSettings,
    MCPServerSettings,
    mcp_server_names,
)
from gliding.config.yamlsource import shown
from gliding.core.checks import Check, CommandSucceeds, FileContains, FileExists

CHECK_KINDS = ("file_exists", "file_contains", "command")


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid", message)


def kind_of(value: Any) -> str:
    """What a YAML value is, in the words a message uses: mapping, list, string, ..."""
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _role(value: Any) -> None:
    """Refuse a name the role registry does not hold."""
    if not isinstance(value, str) or value not in role_names():
        raise _invalid(f"unknown role {shown(value)} (roles: {role_list()})")


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


# Per role, keyed by the registry's role names (an int for turns sets every role; the roles
# left out of a token or cost budget have none of their own).
TurnsPerRole = dict[RoleName, Annotated[int, Field(ge=1, le=MAX_TURNS)] | None]
TokensPerRole = dict[RoleName, Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None]
CostPerRole = dict[RoleName, Annotated[float, Field(ge=0, le=MAX_COST_USD)] | None]


def _number(adapter: TypeAdapter[Any], value: Any, prefix: str) -> Any:
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        raise _invalid(f"{prefix}{exc.errors()[0]['msg']}, got {shown(value)}") from None


_TOKENS: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=1, le=MAX_TOKENS)])
_COST: TypeAdapter[float] = TypeAdapter(
    Annotated[float, Field(ge=0, le=MAX_COST_USD, allow_inf_nan=False)])


class BudgetsSpec(_Spec):
    turns: TurnsPerRole = {}
    prompt_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | TokensPerRole | None = None
    completion_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | TokensPerRole | None = None
    cost_usd: Annotated[float, Field(ge=0, le=MAX_COST_USD)] | CostPerRole | None = None
    wall_time_s: float | None = Field(None, gt=0, le=MAX_WALL_TIME_S)

    @field_validator("prompt_tokens", "completion_tokens", "cost_usd", mode="before")
    @classmethod
    def _number_or_roles(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        number = _COST if info.field_name == "cost_usd" else _TOKENS
        if isinstance(value, dict):  # per role: name the role and the value that is wrong
            for role, item in value.items():
                _role(role)
                if item is not None:
                    _number(number, item, f"{role}: ")
            return value
        return _number(number, value, "")

    @field_validator("turns", mode="before")
    @classmethod
    def _turns_for_every_role(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, int) and not isinstance(value, bool):
            if not 1 <= value <= MAX_TURNS:
                raise _invalid(f"must be from 1 to {MAX_TURNS}, got {shown(value)}")
            return dict.fromkeys(role_names(), value)
        if isinstance(value, dict):
            return value
        raise _invalid(
            f"must be a whole number (every role) or a mapping of role to number "
            f"like {{DA: 6, CA: 3}}, got a {kind_of(value)}"
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
                f"got a {kind_of(value)}: {shown(value)}"
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
        _role(role)
    for role in value:
        if value.count(role) > 1:
            raise _invalid(f"role {role!r} appears more than once")
    if pick(value, "do") is None:
        do = ", ".join(r for r in role_names() if entry(r).phase == "do")
        raise _invalid(f"must contain {do}, a role that does the work; got {shown(value)}")
    for phase in ("plan", "check", "act"):
        playing = [r for r in value if entry(r).phase == phase]
        if len(playing) > 1:
            raise _invalid(f"{' and '.join(playing)} both play {phase}; name one of them")
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
    # commands at lifecycle points (docs/config.md, "Hooks"); they run on a host only where its
    # hooks.allow_task is true, and always in the sandbox
    hooks: tuple[HookSettings, ...] = ()
    # tool calls that wait for a person's yes (docs/config.md, "Approvals"), on top of the
    # host's approvals: a task can add asking, never take the host's away
    approvals: ApprovalPolicy = ApprovalPolicy()

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks(cls, value: Any) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise _invalid(f"must be a list of hooks ({{at: before_tool, command: ...}}), got "
                           f"a {kind_of(value)}")
        return tuple(value)

    @field_validator("hooks")
    @classmethod
    def _hooks_sandboxed(cls, value: tuple[HookSettings, ...]) -> tuple[HookSettings, ...]:
        if any(not hook.sandbox for hook in value):  # false, 0, "no", ... once parsed
            raise _invalid("a task's hook runs in the sandbox; only the host's config "
                           "(hooks.run) may run one outside it")
        return value

    @field_validator("mounts", mode="before")
    @classmethod
    def _mounts(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise _invalid(f"must be a list of paths, got a {kind_of(value)}")
        return tuple(value)

    @field_validator("tool_groups", mode="before")
    @classmethod
    def _tool_groups(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _invalid("must be a mapping of role to a list of tool groups, e.g. "
                           f"{{DA: [web]}}, got a {kind_of(value)}")
        out = {}
        for role, groups in value.items():
            _role(role)
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
            raise _invalid(f"must be a mapping of server name to server, got a {kind_of(value)}")
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
        raise _invalid(f"must be a list of checks, got a {kind_of(value)}")

"""The Tool value, argument checking, tool groups, and the Toolset a role gets from them.

A ``ToolGroup`` is an object that owns what its tools need (the task's checks, an archive
reader, long-term memory), opens and closes it (``open`` / ``aclose``), and offers its tools.
A role names tool groups ("read", "write", "exec", "check", "memory", "knowledge");
ToolGroupManager turns those names into a Toolset whose ``call`` never raises: a refused,
failing or crashing tool comes back as a ToolOutcome with ``ok=False`` and a message the model
can act on. A group the job could not provide (e.g. "knowledge" without a blackboard) is
``unavailable``: a role that names it simply does not get it.

``ToolContext`` carries what differs per call site: the workspace, the tool settings, and the
agent session's own memory (``SessionRecall``, for ``recall``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gliding.config.settings import ToolSettings
from gliding.core.messages import ToolSpec
from gliding.errors import ToolError

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}
_ARTICLE = {"integer": "an", "array": "an", "object": "an"}


class SessionRecall(Protocol):
    """One agent session's memory of its own earlier turns (the context engine's L1 chain)."""

    def recall(self, query: str) -> str:
        """Lines about earlier turns matching ``query``; "" when none. Raises nothing."""
        ...


@dataclass(frozen=True)
class ToolContext:
    """What a tool may touch: the workspace, the tool settings, the session's own memory."""

    workspace: Path
    settings: ToolSettings
    session: SessionRecall | None = None
    began: Path | None = None  # a tool that ``marks_begin`` creates this file as it starts


@dataclass(frozen=True)
class ToolOutput:
    """What a tool may return instead of plain text: the text plus structured ``data`` the
    caller keeps with the archived result (e.g. the check verdicts of run_checks)."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one call as the model sees it; ``ok=False`` output starts with 'error:'."""

    ok: bool
    output: str
    data: dict[str, Any] = field(default_factory=dict)


def prop(type_: str, description: str, **more: Any) -> dict[str, Any]:
    """One JSON-schema property."""
    return {"type": type_, "description": description, **more}


def schema(required: Sequence[str] = (), **properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON-schema object with ``properties`` and ``required``."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


@dataclass(frozen=True)
class Tool:
    """A named async function the model may call, with its JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[str | ToolOutput]]
    idempotent: bool = True  # False: running it twice may differ (a shell command)
    marks_begin: bool = False  # creates ToolContext.began the moment its effects start

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    def _signature(self) -> str:
        required = set(self.parameters.get("required", ()))
        parts = [
            f"{key} ({p.get('type', 'any')}{', required' if key in required else ''})"
            for key, p in self.parameters.get("properties", {}).items()
        ]
        return f"{self.name} takes: {', '.join(parts) or 'no arguments'}"

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        """The arguments with ``null`` optional values dropped and ``5.0`` integers made ``5``.

        Raises:
            ToolError: not an object, a required argument missing, an unknown argument, or a
                value of the wrong JSON type; the message names the argument.
        """
        if not isinstance(arguments, Mapping):
            raise ToolError(
                f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}",
                hint=self._signature(),
            )
        props: Mapping[str, Any] = self.parameters.get("properties", {})
        required = list(self.parameters.get("required", ()))
        unknown = sorted(str(k) for k in arguments if k not in props)
        if unknown:
            raise ToolError(
                f"{self.name}: unknown argument {', '.join(repr(k) for k in unknown)}",
                hint=self._signature(),
            )
        missing = [k for k in required if arguments.get(k) is None]
        if missing:
            raise ToolError(
                f"{self.name}: missing required argument {', '.join(repr(k) for k in missing)}",
                hint=self._signature(),
            )
        checked: dict[str, Any] = {}
        for key, value in arguments.items():
            if value is None:
                continue
            expected = props[key].get("type")
            if expected in _JSON_TYPES and not _has_type(value, expected):
                raise ToolError(
                    f"{self.name}: argument {key!r} must be {_ARTICLE.get(expected, 'a')} "
                    f"{expected}, got {type(value).__name__} {_short(value)}",
                    hint=self._signature(),
                )
            if expected == "integer" and isinstance(value, float):
                value = int(value)
            checked[key] = value
        return checked


def _has_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool) and expected != "boolean":
        return False
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES[expected])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Toolset:
    """The tools one role may call; ``call`` always answers with a ToolOutcome."""

    tools: tuple[Tool, ...]
    _by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t for t in self.tools})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self.tools]

    async def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run tool ``name``; never raises except on cancellation."""
        tool = self._by_name.get(name)
        if tool is None:
            available = ", ".join(self.names) or "none"
            return ToolOutcome(
                False,
                f"error: tool {name!r} is not available to this role; available: {available}",
            )
        try:
            checked = tool.check_arguments(arguments)
            output = await tool.run(checked, ctx)
        except ToolError as exc:
            return ToolOutcome(False, f"error: {exc}")
        except Exception as exc:  # the loop must survive any tool bug; the model sees it
            return ToolOutcome(False, f"error: {tool.name} failed: {type(exc).__name__}: {exc}")
        if isinstance(output, ToolOutput):
            return ToolOutcome(True, output.text, output.data)
        return ToolOutcome(True, output)

    def get(self, name: str) -> Tool | None:
        return self._by_name.get(name)


class ToolGroup:
    """A named set of tools and the resources they use; subclasses open and close those."""

    def __init__(self, name: str, tools: Iterable[Tool], description: str = "") -> None:
        self.name = name
        self.tools: tuple[Tool, ...] = tuple(tools)
        self.description = description or ", ".join(t.name for t in self.tools)

    async def open(self) -> None:
        """Acquire what the tools need. Raises GlidingError when that fails."""

    async def aclose(self) -> None:
        """Release it; closing twice is harmless. Raises nothing."""

    def __repr__(self) -> str:
        return f"ToolGroup({self.name!r}, {[t.name for t in self.tools]})"


class ToolGroupManager:
    """Named tool groups; a role's group names become its Toolset.

    ``unavailable`` names groups this job cannot offer (a role naming one goes without it).
    """

    def __init__(self, groups: Mapping[str, Sequence[Tool]] | Iterable[ToolGroup],
                 unavailable: Iterable[str] = ()) -> None:
        if isinstance(groups, Mapping):
            groups = [ToolGroup(name, tools) for name, tools in groups.items()]
        self._groups: dict[str, ToolGroup] = {}
        for group in groups:
            if group.name in self._groups:
                raise ToolError(f"two tool groups are named {group.name!r}")
            self._groups[group.name] = group
        self.unavailable = frozenset(unavailable) - set(self._groups)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def group(self, name: str) -> ToolGroup | None:
        return self._groups.get(name)

    async def open(self) -> None:
        """Open every group, in order (a failure closes the ones already open)."""
        opened: list[ToolGroup] = []
        try:
            for group in self._groups.values():
                await group.open()
                opened.append(group)
        except BaseException:
            for group in reversed(opened):
                await group.aclose()
            raise

    async def aclose(self) -> None:
        for group in reversed(list(self._groups.values())):
            await group.aclose()

    def toolset(self, group_names: Sequence[str], extra_tools: Sequence[Tool] = ()) -> Toolset:
        """The tools of ``group_names`` plus ``extra_tools``, in order, each name once; groups
        the job cannot offer (``unavailable``) are left out.

        Raises:
            ToolError: an unknown group name, or two different tools with the same name.
        """
        chosen: dict[str, Tool] = {}
        for name in group_names:
            if name in self.unavailable:
                continue
            group = self._groups.get(name)
            if group is None:
                known = ", ".join(sorted(self._groups)) or "none"
                raise ToolError(
                    f"unknown tool group {name!r}; known groups: {known}",
                    hint="fix the role's tool groups",
                )
            for tool in group.tools:
                _add(chosen, tool)
        for tool in extra_tools:
            _add(chosen, tool)
        return Toolset(tuple(chosen.values()))


def _add(chosen: dict[str, Tool], tool: Tool) -> None:
    existing = chosen.get(tool.name)
    if existing is not None and existing is not tool:
        raise ToolError(
            f"two different tools are named {tool.name!r}", hint="give each tool a unique name"
        )
    chosen[tool.name] = tool


def builtin_groups() -> dict[str, list[Tool]]:
    """The tool groups that need nothing but the workspace: read, write and exec (the others
    own resources: see ``gliding.tools.groups.job_groups``)."""
    from gliding.tools.files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
    from gliding.tools.search import GLOB, GREP
    from gliding.tools.shell import BASH

    return {
        "read": [READ_FILE, LIST_DIR, GLOB, GREP],
        "write": [WRITE_FILE, EDIT_FILE],
        "exec": [BASH],
    }

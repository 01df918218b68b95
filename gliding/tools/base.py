"""The Tool value, argument checking, tool groups, and the Toolset a role gets from them.

A ``ToolGroup`` is an object that owns what its tools need (the task's checks, an archive
reader, long-term memory), opens and closes it (``open`` / ``aclose``), and offers its tools.
A role names tool groups ("read", "write", "exec", "check", "memory", "knowledge");
ToolGroupManager turns those names into a Toolset whose ``call`` never raises: a refused,
failing or crashing tool comes back as a ToolOutcome with ``ok=False`` and a message the model
can act on. A group the job could not provide (e.g. "knowledge" without a blackboard) is
``unavailable``: a role that names it simply does not get it.

``ToolContext`` carries what differs per call site: the workspace, the tool settings, the
agent session's own memory (``SessionRecall``, for ``recall``) and the deadline of the call.

Every call is bounded: ``Toolset.call`` stops waiting at the tool's own ``timeout_s`` or at
``ToolContext.deadline`` (the end of the job's wall time budget, set by the agent loop),
whichever comes first, and answers ``error: <tool> timed out after Ns``. Work a tool runs in a
worker thread cannot be cancelled, so it gets the same deadline and must stop by it itself
(raising TimeoutError, which ``call`` reports the same way): the file and search tools check
it as they go, bound their regexes with it, and are waited for (``ToolContext.deadline`` is a
time.monotonic() value, so the work keeps real time even where a test runs the loop on a
virtual clock).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import anyio

from gliding.config.settings import ToolSettings
from gliding.core.messages import ToolSpec
from gliding.errors import ToolError
from gliding.tools.sandbox import Sandbox

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}
_ARTICLE = {"integer": "an", "array": "an", "object": "an"}
CALL_TIMEOUT_S = 30.0  # what one call of a file, search or read-back tool may take, at most
_TIMEOUT_HINT = ("the call was stopped; ask for less (a narrower path or glob, a simpler "
                 "pattern, a page of a file with offset and limit) or run a quicker command")


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
    sandbox: Sandbox | None = None  # what confines commands; None: the one ``settings`` ask for
    # time.monotonic() by which the call must end: the job's wall budget (set by the loop),
    # then within ``Toolset.call`` also the tool's own timeout; None: no such bound
    deadline: float | None = None


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
    # seconds one call may take; None: the tool bounds its work itself (bash and run_checks
    # kill their commands at tools.bash.timeout_s and each check's timeout_s). Either way a
    # call also ends with the job's wall time budget (ToolContext.deadline).
    timeout_s: float | None = None

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


def check_deadline(deadline: float | None) -> None:
    """For work in a worker thread: stop once ``deadline`` (time.monotonic()) has passed.

    Raises:
        TimeoutError: it has; ``Toolset.call`` answers the model that the call timed out.
    """
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError("the call's deadline passed")


def _failed(tool: Tool, exc: Exception) -> ToolOutcome:
    return ToolOutcome(False, f"error: {tool.name} failed: {type(exc).__name__}: {exc}")


def _timed_out(tool: Tool, seconds: float, own: bool) -> ToolOutcome:
    why = "its own limit" if own else "what was left of the job's wall time budget"
    return ToolOutcome(False, f"error: {tool.name} timed out after {seconds:.3g}s ({why})\n"
                              f"  hint: {_TIMEOUT_HINT}")


def _outcome(output: str | ToolOutput) -> ToolOutcome:
    if isinstance(output, ToolOutput):
        return ToolOutcome(True, output.text, output.data)
    return ToolOutcome(True, output)


def _loop_time(deadline: float) -> float:
    """``deadline`` (a time.monotonic() value) on the event loop's clock, which a test may run
    virtually."""
    return deadline if deadline == math.inf else anyio.current_time() + deadline - time.monotonic()


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
        """Run tool ``name`` within its timeout and ``ctx.deadline`` (module docstring); never
        raises except on cancellation."""
        tool = self._by_name.get(name)
        if tool is None:
            available = ", ".join(self.names) or "none"
            return ToolOutcome(
                False,
                f"error: tool {name!r} is not available to this role; available: {available}",
            )
        now = time.monotonic()
        own = now + tool.timeout_s if tool.timeout_s is not None else math.inf
        wall = ctx.deadline if ctx.deadline is not None else math.inf
        if wall <= now:
            return ToolOutcome(False, f"error: {tool.name} was not run: the job's wall time "
                                      "budget is spent\n  hint: finish with what is done")
        deadline = min(own, wall)
        try:
            checked = tool.check_arguments(arguments)
            with anyio.move_on_at(_loop_time(deadline)):
                output = await tool.run(checked, dataclasses.replace(
                    ctx, deadline=None if deadline == math.inf else deadline))
                return _outcome(output)
            return _timed_out(tool, deadline - now, own <= wall)
        except ToolError as exc:
            return ToolOutcome(False, f"error: {exc}")
        except TimeoutError as exc:
            if time.monotonic() >= deadline:  # work in a thread that stopped at the deadline
                return _timed_out(tool, deadline - now, own <= wall)
            return _failed(tool, exc)  # a timeout of the tool's own (a socket's, say)
        except Exception as exc:  # noqa: BLE001 - the loop must survive any tool bug; the model sees it
            return _failed(tool, exc)

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

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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

    async def __aenter__(self) -> Self:
        """``async with manager:`` opens every group and closes them all when the block ends,
        however it ends (a group whose ``open`` fails leaves none open)."""
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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

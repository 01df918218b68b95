"""What one agent session offers the model: a tool list whose bytes never change, and how a
call the model makes maps onto the tool that runs.

A provider caches a prompt in the order tools → system → messages, so a ``tools`` array that
changes between two calls of one session re-writes the whole cached prefix. The session
therefore declares every tool it will ever offer on its first turn (``declare``):

- the tools of the role's groups, in their declared order;
- ``tool_search`` and ``call_tool`` when the role may load groups on demand. ``tool_search``'s
  description names the groups (fixed for the session), so a model loads the one it needs
  without first asking for the list. A loaded group's
  schemas arrive as ``tool_search``'s result (an appended message), and its tools are called
  through ``call_tool(name, arguments)``; a model that calls a loaded tool by its own name is
  taken at its word too (``resolve``);
- ``finish``, from the first turn: the loop refuses it until the role may finish.

With model-written summaries each of them has the optional ``summary`` argument (a tool with
one of its own keeps it). ``callable_now`` is the narrower list a grammar-constrained model is
held to on one turn (no ``finish`` before it is allowed; the loaded tools by their own names),
which never reaches a hosted provider's request body.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gliding.core.messages import ToolCall, ToolSpec
from gliding.tools.base import ToolOutcome, Toolset, prop, schema

TOOL_SEARCH = ToolSpec("tool_search", "List the tool groups you may load, or load one.", schema(
    group=prop("string", "the group to load; leave out to list them")))
CALL_TOOL = ToolSpec(
    "call_tool",
    "Call a tool that tool_search loaded: its name, and its arguments as an object that fits "
    "the schema tool_search listed.",
    schema(["name"], name=prop("string", "the loaded tool's name"),
           arguments=prop("object", "the tool's arguments")))
META_TOOLS = frozenset({"finish", "tool_search", "call_tool"})  # never behind call_tool
SUMMARY_PROPERTY = prop("string", "optional: this step in one line, for your history")


def with_summary(spec: ToolSpec) -> ToolSpec:
    """``spec`` with an optional ``summary`` argument, unless it has one of its own."""
    params = dict(spec.parameters or {"type": "object", "properties": {}})
    props = dict(params.get("properties") or {})
    if "summary" in props:
        return spec
    props["summary"] = SUMMARY_PROPERTY
    params["properties"] = props
    return ToolSpec(spec.name, spec.description, params)


@dataclass(frozen=True)
class Offer:
    """The tools a session declares, in order; the same bytes on every turn."""

    tools: tuple[ToolSpec, ...]
    summarised: frozenset[str]  # tools given the loop's ``summary`` argument

    def callable_now(self, *, may_finish: bool,
                     loaded: Sequence[ToolSpec] = ()) -> tuple[ToolSpec, ...]:
        """The tools a model may call this turn: the declared ones (``finish`` only when
        allowed) and the loaded ones by their own names."""
        declared = [t for t in self.tools if may_finish or t.name != "finish"]
        names = {t.name for t in declared}
        return (*declared, *(with_summary(t) if self.summarised else t
                             for t in loaded if t.name not in names))


def search_spec(groups: Sequence[str]) -> ToolSpec:
    """``tool_search``, its description naming the ``groups`` it may load."""
    if not groups:
        return TOOL_SEARCH
    return ToolSpec("tool_search", f"{TOOL_SEARCH.description} Groups: {', '.join(groups)}.",
                    TOOL_SEARCH.parameters)


def declare(specs: Sequence[ToolSpec], finish: ToolSpec, *, on_demand: Sequence[str],
            summaries: bool) -> Offer:
    """The session's tool list: its groups' tools, then ``tool_search`` and ``call_tool`` (with
    groups on demand: ``on_demand`` names them), then ``finish``; each with the ``summary``
    argument when ``summaries``."""
    meta = (search_spec(on_demand), CALL_TOOL) if on_demand else ()
    tools = [*specs, *meta, finish]
    if not summaries:
        return Offer(tuple(tools), frozenset())
    offered = [with_summary(t) for t in tools]
    added = frozenset(w.name for t, w in zip(tools, offered, strict=True) if w is not t)
    return Offer(tuple(offered), added)


def take_summary(call: ToolCall, own_summary: frozenset[str]) -> tuple[ToolCall, str | None]:
    """The call without the ``summary`` argument the loop offered (the tool never sees it), and
    that summary. A tool with a ``summary`` argument of its own (``own_summary``: ``finish`` of
    DA, say) keeps it, and it is the line too. A ``summary`` inside ``call_tool``'s arguments
    is taken out the same way, unless that tool has one of its own."""
    args = dict(call.arguments)
    text = args.get("summary")
    if "summary" in args and call.name not in own_summary:
        del args["summary"]
    inner = args.get("arguments")
    if (call.name == "call_tool" and isinstance(inner, dict) and "summary" in inner
            and str(args.get("name")) not in own_summary):
        if not (isinstance(text, str) and text.strip()):
            text = inner["summary"]
        args["arguments"] = {k: v for k, v in inner.items() if k != "summary"}
    own = text.strip() if isinstance(text, str) and text.strip() else None
    if args == call.arguments:
        return call, own
    return ToolCall(call.id, call.name, args), own


def own_summaries(tools: Sequence[ToolSpec]) -> frozenset[str]:
    """The tools among ``tools`` whose schema has a ``summary`` argument of their own."""
    return frozenset(t.name for t in tools
                     if "summary" in ((t.parameters or {}).get("properties") or {}))


@dataclass(frozen=True)
class Resolved:
    """The call to run (the real tool and its arguments), or why it cannot run."""

    call: ToolCall
    problem: str | None = None


def resolve(call: ToolCall, toolset: Toolset, loadable: Mapping[str, Toolset]) -> Resolved:
    """``call_tool(name, arguments)`` as the call of tool ``name``; any other call as it is,
    unless it names a tool of a group that is not loaded yet (then the problem says how to
    load it). ``toolset`` holds the tools the session may run now (its groups and the loaded
    ones)."""
    if call.name != "call_tool":
        if toolset.get(call.name) is None and call.name not in META_TOOLS:
            group = _group_of(call.name, loadable)
            if group is not None:
                return Resolved(call, f"tool {call.name!r} is not available to this role until "
                                      f"its group is loaded: call tool_search(group={group!r}) "
                                      "first")
        return Resolved(call)
    name = call.arguments.get("name")
    rest = {k: v for k, v in call.arguments.items() if k not in ("name", "arguments")}
    arguments: Any = call.arguments.get("arguments")
    if arguments is None:
        arguments = rest  # call_tool(name=..., url=...): the arguments laid out flat
    elif isinstance(arguments, str):  # the arguments as JSON text: some models send them so
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    loaded = ", ".join(toolset.names) or "none"
    if not isinstance(name, str) or not name:
        return Resolved(call, "call_tool needs the name of a loaded tool; loaded: " + loaded)
    if name in META_TOOLS:
        return Resolved(call, f"call {name} directly, not through call_tool")
    if not isinstance(arguments, dict):
        return Resolved(call, f"call_tool: the arguments of {name} must be a JSON object, got "
                              f"{type(arguments).__name__}")
    if toolset.get(name) is None:
        group = _group_of(name, loadable)
        if group is not None:
            return Resolved(call, f"call_tool: {name} is in group {group!r}, which is not "
                                  f"loaded: call tool_search(group={group!r}) first")
        return Resolved(call, f"call_tool: no loaded tool named {name!r}; the tools you may "
                              f"call: {loaded} (tool_search lists the groups you may load)")
    return Resolved(ToolCall(call.id, name, dict(arguments)))


def _group_of(name: str, loadable: Mapping[str, Toolset]) -> str | None:
    return next((g for g, ts in loadable.items() if ts.get(name) is not None), None)


def tool_search(arguments: Mapping[str, Any], toolset: Toolset,
                on_demand: Mapping[str, Toolset]) -> tuple[ToolOutcome, Toolset]:
    """List the loadable groups, or load one: the answer carries the loaded tools' schemas
    (one JSON object a line, keys sorted) and the toolset grows by them."""
    group = arguments.get("group")
    listing = "; ".join(f"{name}: {', '.join(ts.names)}" for name, ts in on_demand.items())
    if not group:
        return ToolOutcome(True, f"groups you may load: {listing}"), toolset
    chosen = on_demand.get(str(group))
    if chosen is None:
        return ToolOutcome(False, f"error: no group {group!r} to load; {listing}"), toolset
    merged = {t.name: t for t in (*toolset.tools, *chosen.tools)}
    lines = [f"loaded {group}: {', '.join(chosen.names)}",
             "Call them with call_tool(name, arguments). Their schemas:"]
    lines += [json.dumps({"name": t.name, "description": t.description,
                          "parameters": t.parameters}, ensure_ascii=False, sort_keys=True)
              for t in chosen.tools]
    return ToolOutcome(True, "\n".join(lines)), Toolset(tuple(merged.values()))

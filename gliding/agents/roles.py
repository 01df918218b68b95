"""Roles as data: ``roles/<ROLE>.yaml`` (prompt, tool groups, turn cap, finish schema) plus the
numbered rules of ``constitutions/`` rendered into the system prompt; both folders ship inside
the package (``gliding/roles/``, ``gliding/constitutions/``) unless ``GLIDING_HOME`` replaces them.

Which roles exist, and the keys every layer reads (phase, projection), is the registry's
(``gliding.config.roles``); this module loads the rest of each file for the agent loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gliding.config.roles import Phase, home_dir, registry
from gliding.core.messages import Message, ToolCall, ToolSpec
from gliding.errors import ConfigError
from gliding.tools.groups import GROUP_NAMES, known_group


@dataclass(frozen=True)
class RoleSpec:
    name: str
    title: str
    prompt: str
    tool_groups: tuple[str, ...]
    max_turns: int
    finish: ToolSpec
    phase: Phase = "do"  # the PDCA part it plays (its registry entry): what it answers
    rules: tuple[str, ...] = ()
    universal_rules: tuple[str, ...] = ()
    examples: tuple[Message, ...] = ()
    finish_requires: tuple[str, ...] = ()  # tools that must have run before finish is offered
    finish_min_calls: int = 0  # successful tool calls needed before finish is offered
    tool_groups_on_demand: tuple[str, ...] = ()  # groups the role may load with tool_search

    def system_prompt(self) -> str:
        """Role prompt then numbered rules: U1.. for universal ones, <ROLE>1.. for the role's."""
        lines = [self.prompt.strip(), "", "Rules:"]
        lines += [f"U{i}. {rule}" for i, rule in enumerate(self.universal_rules, 1)]
        lines += [f"{self.name}{i}. {rule}" for i, rule in enumerate(self.rules, 1)]
        return "\n".join(lines)


def load_role(name: str, home: Path | None = None) -> RoleSpec:
    """Load one role; a missing or malformed file is a ConfigError naming it."""
    base = home or home_dir()
    data = _read_yaml(base / "roles" / f"{name}.yaml")
    try:
        phase = registry(base)[name].phase
    except KeyError:
        raise ConfigError(f"roles/{name}.yaml: no such role") from None
    try:
        finish = data["finish"]
        spec = RoleSpec(
            name=str(data["name"]),
            title=str(data.get("title", name)),
            prompt=str(data["prompt"]),
            tool_groups=tuple(str(g) for g in data.get("tool_groups") or ()),
            max_turns=int(data["max_turns"]),
            finish=ToolSpec("finish", str(finish["description"]), dict(finish["parameters"])),
            phase=phase,
            rules=_rules(base / "constitutions" / f"{name}.yaml"),
            universal_rules=_rules(base / "constitutions" / "universal.yaml"),
            examples=_examples(data.get("examples") or [], name),
            finish_requires=tuple(str(t) for t in data.get("finish_requires") or ()),
            finish_min_calls=int(data.get("finish_min_calls", 0)),
            tool_groups_on_demand=tuple(str(g) for g in data.get("tool_groups_on_demand")
                                        or ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"roles/{name}.yaml: missing or bad field: {exc}") from exc
    if spec.name != name:
        raise ConfigError(f"roles/{name}.yaml: name is {spec.name!r}, expected {name!r}")
    for key, groups in (("tool_groups", spec.tool_groups),
                        ("tool_groups_on_demand", spec.tool_groups_on_demand)):
        unknown = [g for g in groups if not known_group(g)]
        if unknown:
            raise ConfigError(f"roles/{name}.yaml: {key}: unknown tool group "
                              f"{', '.join(map(repr, unknown))}",
                              hint=f"tool groups: {', '.join(GROUP_NAMES)}, "
                                   "mcp_<server> (docs/mcp.md)")
    return spec


def load_roles(home: Path | None = None) -> dict[str, RoleSpec]:
    """Every role of the registry, loaded."""
    return {name: load_role(name, home) for name in registry(home)}


def _examples(items: list[Any], role: str) -> tuple[Message, ...]:
    """The demonstration dialogue: ``user`` text, a ``call`` of a tool, the ``result`` it got."""
    out: list[Message] = []
    last_call: ToolCall | None = None
    for i, item in enumerate(items):
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"roles/{role}.yaml: examples[{i}] must be one of user/call/result")
        (kind, value), = item.items()
        if kind == "user":
            out.append(Message("user", str(value)))
        elif kind == "call":
            last_call = ToolCall(f"example-{i}", str(value["tool"]), dict(value["arguments"]))
            out.append(Message("assistant", "", (last_call,)))
        elif kind == "result" and last_call is not None:
            out.append(Message("tool", str(value), (), last_call.id, last_call.name))
        else:
            raise ConfigError(f"roles/{role}.yaml: examples[{i}]: unknown or misplaced {kind!r}")
    return tuple(out)


def _rules(path: Path) -> tuple[str, ...]:
    if not path.exists():
        return ()
    rules = _read_yaml(path).get("rules") or []
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError(f"{path}: 'rules' must be a list of strings")
    return tuple(rules)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"role file missing: {path}",
                          hint="GLIDING_HOME, when set, replaces the shipped roles/") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data

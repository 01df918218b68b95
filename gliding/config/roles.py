"""The role registry: which agent roles exist, read from the role files, and nowhere else.

A role is one file, ``roles/<ROLE>.yaml``, with its constitution in
``constitutions/<ROLE>.yaml``, both under the home folder: the ``gliding`` package itself, which
ships its roles as package data (``gliding/roles/``, ``gliding/constitutions/``), or, replacing
those, the folder ``GLIDING_HOME`` names. Dropping a pair of files there adds a role; every
module that names roles asks this registry: task files and settings validate role names
against it, the scripted model's reply files too, the worker and the supervisor dispatch on a
role's ``phase``, the blackboard projection reads its ``projection`` types, the crash points
accept its name.

The registry reads only the keys every layer needs::

    name: CA                 # the file's stem; the wire and the task files use it
    phase: check             # plan | do | check | act: the PDCA part it plays, hence its answer
    auto: true               # the role the auto pipelines pick for its phase (one per phase)
    projection: [gl:Artifact, gl:Step]   # the board node types its briefing shows
    frame: {"@type": Fact, derivedFrom: {"@embed": "@always"}}
                             # the JSON-LD frame (vocabulary terms, the inline @context is
                             # added) that shapes the facts around its task in its briefing

the rest (prompt, tools, finish schema, examples) is the agents' business
(``gliding.agents.roles``). Files are read once per home folder and cached; ``forget`` drops
the cache (a test that writes role files, a reload).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, get_args

import yaml
from pydantic import AfterValidator

from gliding.errors import ConfigError

Phase = Literal["plan", "do", "check", "act"]
PHASES: tuple[Phase, ...] = get_args(Phase)
"""The PDCA parts in order; the registry lists roles in this order, then by name."""
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_NODE_TYPE = re.compile(r"gl:[A-Za-z]{1,64}")  # pasted into SPARQL: a word, nothing else


@dataclass(frozen=True)
class RoleEntry:
    """What every layer may know of a role (its file's registry keys)."""

    name: str
    phase: Phase
    auto: bool = False
    projection: tuple[str, ...] = ()
    frame: str = ""  # the JSON-LD frame of its briefing's facts, as JSON ("": none)


def home_dir() -> Path:
    """The folder holding roles/ and constitutions/: ``GLIDING_HOME``, else the package's own."""
    env = os.environ.get("GLIDING_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[1]


def registry(home: Path | None = None) -> Mapping[str, RoleEntry]:
    """Every role of ``home`` (default ``home_dir()``), in PDCA order, then by name.

    Raises:
        ConfigError: no roles folder, no role file, a malformed one, or two auto roles of
            one phase.
    """
    return _read(str((home or home_dir()).resolve()))


def forget() -> None:
    """Drop the cached registries: the next lookup reads the role files again."""
    _read.cache_clear()


def role_names(home: Path | None = None) -> tuple[str, ...]:
    return tuple(registry(home))


def entry(name: str, home: Path | None = None) -> RoleEntry:
    """The registry entry of role ``name``.

    Raises:
        ValueError: no such role (the message lists the known ones).
    """
    return registry(home).get(name) or _unknown(name)


def known_role(name: str) -> str:
    """``name`` when it is a role; a pydantic ``AfterValidator``."""
    entry(name)
    return name


RoleName = Annotated[str, AfterValidator(known_role)]
"""A role name, validated against the registry when a model is validated (not at import)."""


def pick(roles: Iterable[str], phase: Phase) -> str | None:
    """The first of ``roles`` that plays ``phase``, or None."""
    return next((r for r in roles if entry(r).phase == phase), None)


def auto_roles(phases: Iterable[Phase]) -> tuple[str, ...]:
    """The roles the auto pipelines use for ``phases`` (each phase's ``auto`` role)."""
    auto = {e.phase: e.name for e in registry().values() if e.auto}
    return tuple(auto[p] for p in phases if p in auto)


def role_list() -> str:
    """The known roles for a message: ``PA, DA, CA, AA``."""
    return ", ".join(registry())


def _unknown(name: object) -> NoReturn:
    raise ValueError(f"unknown role {name!r} (roles: {role_list()})")


@functools.lru_cache(maxsize=8)
def _read(home: str) -> Mapping[str, RoleEntry]:
    folder = Path(home) / "roles"
    files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not files:
        raise ConfigError(f"no role files in {folder}",
                          hint="GLIDING_HOME replaces the shipped roles: point it at a folder "
                               "holding roles/ and constitutions/ (copies of the package's)")
    entries = [_entry(path) for path in files]
    entries.sort(key=lambda e: (PHASES.index(e.phase), e.name))
    seen: dict[str, str] = {}
    for e in entries:
        if e.auto and e.phase in seen:
            raise ConfigError(f"roles/{e.name}.yaml: auto: {seen[e.phase]} is the auto role of "
                              f"phase {e.phase} already; at most one role per phase is auto")
        if e.auto:
            seen[e.phase] = e.name
    return {e.name: e for e in entries}


def _entry(path: Path) -> RoleEntry:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the role file: {exc}") from exc
    where = f"roles/{path.name}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    name, phase = data.get("name"), data.get("phase")
    if name != path.stem:
        raise ConfigError(f"{where}: name is {name!r}, expected {path.stem!r} (the file's name)")
    if not _NAME.fullmatch(path.stem):
        raise ConfigError(f"{where}: a role's name is a letter, then up to 31 letters, digits "
                          "or underscores (it is part of bus topics and IRIs)")
    if phase not in PHASES:
        raise ConfigError(f"{where}: phase must be one of {', '.join(PHASES)}, got {phase!r}")
    projection: Any = data.get("projection") or []
    if not isinstance(projection, list) or not all(
            isinstance(t, str) and _NODE_TYPE.fullmatch(t) for t in projection):
        raise ConfigError(f"{where}: projection must be a list of node types like [gl:Step]")
    auto = data.get("auto", False)
    if not isinstance(auto, bool):
        raise ConfigError(f"{where}: auto must be true or false, got {auto!r}")
    frame = data.get("frame")
    if frame is not None:
        _check_frame(frame, f"{where}: frame")
    return RoleEntry(name=name, phase=phase, auto=auto, projection=tuple(projection),
                     frame=json.dumps(frame, sort_keys=True) if frame else "")


_FRAME_KEY = re.compile(r"@(?:type|id|embed|explicit|omitDefault|requireAll|default)|"
                        r"[A-Za-z]{1,64}")
_FRAME_DEPTH = 4


def _check_frame(frame: Any, where: str, depth: int = 0) -> None:
    """A frame is a mapping of vocabulary words and framing keywords, a few levels deep; its
    ``@context`` is the vocabulary's own, added by the projection (never one of the file's:
    nothing is ever fetched). The words are checked against the vocabulary where it is used."""
    if not isinstance(frame, dict) or depth > _FRAME_DEPTH:
        raise ConfigError(f"{where} must be a mapping (at most {_FRAME_DEPTH} levels deep) "
                          "of vocabulary words and JSON-LD framing keywords")
    for key, value in frame.items():
        if not isinstance(key, str) or not _FRAME_KEY.fullmatch(key):
            raise ConfigError(f"{where}: {key!r} is not a vocabulary word or a framing keyword",
                              hint="a frame names node types and properties as the "
                                   "vocabulary does (Fact, derivedFrom); no @context")
        if isinstance(value, dict):
            _check_frame(value, f"{where}.{key}", depth + 1)
        elif isinstance(value, list):
            if not all(isinstance(v, str | bool | int) for v in value):
                raise ConfigError(f"{where}.{key}: a list of words is all a frame's list holds")
        elif not isinstance(value, str | bool | int):
            raise ConfigError(f"{where}.{key}: {value!r} is not a frame value")

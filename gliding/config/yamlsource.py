"""YAML that remembers where things are: reading a YAML file, line numbers, readable errors.

Owns the three steps every user-written YAML file (task files, config.yaml) goes through:

- ``read_yaml_text``: the file's text, or an error naming the file (missing, a directory, not
  UTF-8, unreadable, larger than its limit: ``USER_FILE_MAX_BYTES`` for task and config files);
- ``load_yaml_with_lines``: the data (PyYAML's ``SafeLoader``) plus a map from key path, e.g.
  ``("budgets", "turns", "DA")`` or ``("checks", 1, "path")``, to the 1-based line of that key or
  item; duplicate keys are refused, naming the key and both lines; so is a document that would
  expand to more than ``MAX_YAML_NODES`` values with its aliases counted each time they are used
  (an "alias bomb" of a few hundred bytes otherwise becomes millions of values to validate);
- ``describe_validation_error``: a pydantic ``ValidationError`` as one line per problem,
  ``<source>:<line>: <field>: <message>``, the line being the closest one known for the field
  (``error_message`` words a single error, for sources without lines such as environment
  variables); at most ``MAX_PROBLEMS`` lines, then how many more there are.

Whatever a file holds, an error message stays short: values and keys are shown clipped
(``shown``, ``format_key_path``), so no message grows with the file.

The caller picks the error class (``TaskFileError``, ``ConfigError``); nothing here writes.
"""

from __future__ import annotations

import os
import reprlib
import stat
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gliding.errors import UsageError

KeyPath = tuple[Any, ...]
"""Keys (mapping keys as YAML built them) and list indexes from the document root down."""

LineMap = dict[KeyPath, int]
"""Key path to the 1-based line of its key (mappings) or of the item itself (lists)."""

ErrorFactory = Callable[[str], UsageError]

MAX_YAML_BYTES = 1 << 20
"""The largest YAML file read unless the caller says less (1 MiB); a larger one is refused
unread. Task and config files say 256 KiB (``USER_FILE_MAX_BYTES``): PyYAML's pure-Python
parser takes about 6 s a MiB, and such files are a few hundred bytes."""
USER_FILE_MAX_BYTES = 256 << 10
MAX_YAML_NODES = 100_000
"""Values (scalars, lists, mappings) a document may expand to, an alias counted each time it is
used; a hand-written file has a few hundred."""
MAX_PROBLEMS = 20
"""Validation problems listed in one message; the rest are counted."""
MAX_SHOWN = 60
"""Characters of a value or key quoted in an error message, at most."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TAG_PREFIX = "tag:yaml.org,2002:"

# What SafeConstructor raises, untranslated, for `!!int x`, `!!timestamp x`, `!!bool x`, ...
_SCALAR_ERRORS = (ValueError, TypeError, AttributeError, KeyError, OverflowError)

# pydantic error types whose message already says everything (the input is not repeated).
_SELF_EXPLAINING = {"missing", "extra_forbidden", "value_error", "assertion_error", "invalid"}


def read_yaml_text(path: Path, *, what: str, error: ErrorFactory,
                   max_bytes: int = MAX_YAML_BYTES) -> str:
    """Return the text of ``path``; ``what`` ("task file", "config file") names it in errors.

    Only a regular file is read: a FIFO, socket or device is refused before a byte is read
    (it is opened non-blocking, so a FIFO without a writer cannot hold the thread). At most
    ``max_bytes`` are read: a larger file is refused without reading the rest.

    Raises:
        the ``error`` class given: the path has a NUL byte, the file is missing, is a
        directory or not a regular file, cannot be read, is larger than ``max_bytes``, or is
        not UTF-8 text (the message gives the line of the first bad byte).
    """
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except ValueError as exc:  # an embedded NUL byte
        raise error(f"{shown(source, 200)} is not a file name: it has a NUL byte") from exc
    except FileNotFoundError as exc:
        raise error(f"{source}: {what} not found") from exc
    except IsADirectoryError as exc:
        raise error(f"{source}: is a directory, not a {what}") from exc
    except OSError as exc:
        raise error(f"{source}: cannot read the {what}: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{source}: is a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{source}: is {_file_kind(st.st_mode)}, not a regular file: "
                        f"not a {what}")
        size = st.st_size
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(max_bytes + 1) if size <= max_bytes else b""
    except OSError as exc:
        raise error(f"{source}: cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if size > max_bytes or len(raw) > max_bytes:
        found = f"{size} bytes" if size > max_bytes else f"more than {max_bytes} bytes"
        raise error(
            f"{source}: the {what} is too large ({found}); a {what} may be at most "
            f"{_size(max_bytes)} ({max_bytes} bytes)"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise error(
            f"{source}:{line}: the {what} is not UTF-8 text (byte 0x{bad} at offset {exc.start})"
        ) from exc


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def _size(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    return f"{n >> 10} KiB" if n >= 1 << 10 and n % (1 << 10) == 0 else f"{n} bytes"


def load_yaml_with_lines(
    text: str, source: str, *, error: ErrorFactory
) -> tuple[Any, LineMap]:
    """Parse one YAML document safely; return its data and the line of every key and item.

    An empty document (nothing, only comments, ``null``) gives ``(None, {})``. The root path
    ``()`` maps to the line where the document's content starts. Keys under a merge key
    (``<<: *anchor``) and under a repeated alias are not mapped; their lines fall back to the
    nearest mapped parent.

    Raises:
        the ``error`` class given, its message ``<source>:<line>:<column>: ...``, for YAML
        syntax errors, several documents, tags SafeLoader refuses, duplicate keys, an alias
        inside what it names, and a document that expands to more than ``MAX_YAML_NODES``
        values (the line is that of the smallest part that does).
    """
    try:
        loader = yaml.SafeLoader(text)  # checks every character up front
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            _check_expansion(node, source, error)  # before anything is built from it
            lines: LineMap = {(): node.start_mark.line + 1}
            _walk(node, (), lines, yaml.constructor.SafeConstructor(), set(), source, error)
            data = loader.construct_document(node)
        except _SCALAR_ERRORS as exc:  # an explicit tag on a value it cannot build, `!!int x`
            raise error(_bad_scalar_message(node, source, exc)) from exc  # type: ignore[arg-type]
        finally:
            loader.dispose()
        if data is None:
            return None, {}
    except yaml.MarkedYAMLError as exc:
        raise error(_marked_message(exc, source)) from exc
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise error(
            f"{source}:{line}: invalid YAML: character U+{code:04X} is not allowed ({exc.reason})"
        ) from exc
    except yaml.YAMLError as exc:
        raise error(f"{source}: invalid YAML: {exc}") from exc
    except RecursionError as exc:
        raise error(f"{source}: invalid YAML: nested too deeply") from exc
    return data, lines


def nul_byte_at(data: Any) -> KeyPath | None:
    """Where the first string of ``data`` (a value, or a key: then the path of its mapping)
    holds a NUL byte, or None. No path, command or name can hold one: the operating system
    cuts a path there, and Python refuses it with a ValueError far from the file."""
    stack: list[tuple[KeyPath, Any]] = [((), data)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return path
        elif isinstance(value, dict | list) and id(value) not in seen:
            seen.add(id(value))  # an alias stands for the same object: walked once
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and "\x00" in key:
                    return path
                stack.append(((*path, key), item))
    return None


def format_key_path(path: Iterable[Any]) -> str:
    """``("checks", 1, "path")`` -> ``checks[1].path``; the empty path is ``(top level)``.
    A long key is clipped (``clip``)."""
    out = ""
    for part in path:
        if part == "[key]":  # pydantic's mark of a mapping key that failed: the key says it
            continue
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            name = clip(str(part) if isinstance(part, str) else shown(part))
            out += f".{name}" if out else name
    return out or "(top level)"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 2, 4, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = MAX_SHOWN, MAX_SHOWN, MAX_SHOWN


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters: a huge or deeply
    nested value is never rendered whole (``reprlib`` stops early), then clipped."""
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, a cycle
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` cut to ``limit`` characters, the cut marked ``...``."""
    return text if len(text) <= limit else text[: max(limit - 3, 1)] + "..."


def line_for(path: KeyPath, lines: LineMap) -> int:
    """The line of ``path``, else of its closest mapped parent, else 1."""
    for end in range(len(path), -1, -1):
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return 1


def describe_validation_error(
    exc: ValidationError,
    source: str,
    lines: LineMap,
    *,
    model: type[BaseModel] | None = None,
) -> str:
    """One line per problem, ``<source>:<line>: <field>: <message>``, ordered by line.

    ``model`` (the model that was validated) lets unknown-field errors list the fields that
    are allowed there; a model may name its keys with a class attribute ``unknown_key_noun``
    (e.g. ``"role"``) so the message reads ``unknown role 'QA' (roles: PA, DA, CA, AA)``.
    """
    errors = exc.errors(include_url=False)
    placed = sorted(((line_for(tuple(err["loc"]), lines), index) for index, err in
                     enumerate(errors)))
    rows = [f"{source}:{line}: {format_key_path(errors[index]['loc'])}: "
            f"{error_message(errors[index], model)}" for line, index in placed[:MAX_PROBLEMS]]
    return bounded_problems(rows, len(errors))


def bounded_problems(rows: list[str], total: int) -> str:
    """The first ``MAX_PROBLEMS`` of ``rows``, one a line, then ``... and N more problems``
    when ``total`` is more."""
    shown_rows = rows[:MAX_PROBLEMS]
    if total > len(shown_rows):
        more = total - len(shown_rows)
        shown_rows.append(f"... and {more} more problem{'s' if more != 1 else ''}")
    return "\n".join(shown_rows)


def _walk(
    node: yaml.Node,
    path: KeyPath,
    lines: LineMap,
    keys: yaml.constructor.SafeConstructor,
    seen: set[int],
    source: str,
    error: ErrorFactory,
) -> None:
    if id(node) in seen:  # an alias: its content was walked where the anchor stands
        return
    if isinstance(node, yaml.SequenceNode):
        seen.add(id(node))
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _walk(item, (*path, index), lines, keys, seen, source, error)
    elif isinstance(node, yaml.MappingNode):
        seen.add(id(node))
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = keys.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader itself refuses unhashable keys, with their position
            line = key_node.start_mark.line + 1
            if key in first_line:
                name = clip(str(key))
                name = f"{format_key_path(path)}.{name}" if path else name
                raise error(
                    f"{source}:{line}: duplicate key {name}: "
                    f"first at line {first_line[key]}, again at line {line}"
                )
            first_line[key] = line
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, keys, seen, source, error)


def _check_expansion(root: yaml.Node, source: str, error: ErrorFactory) -> None:
    """Refuse a document whose values, aliases expanded, number more than MAX_YAML_NODES, or
    whose alias stands inside the very node it names (a cycle).

    Counts each node once (memoised, iteratively), so the check itself costs no more than the
    node graph the parser already built, however far the aliases would expand.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(size[id(child)] for child in _children(node))
            size[key] = min(total, MAX_YAML_NODES + 1)
            if total > MAX_YAML_NODES:
                mark = node.start_mark
                raise error(
                    f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: the document "
                    f"expands to more than {MAX_YAML_NODES} values (an alias counts as "
                    "everything it names, each time it is used); write the values out, or "
                    "use fewer aliases"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            mark = node.start_mark
            raise error(f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: an alias "
                        "refers to a node it stands inside (a recursive structure)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _bad_scalar_message(root: yaml.Node, source: str, exc: Exception) -> str:
    """Find the scalar whose tag does not fit its text, by building each one on its own."""
    builder = yaml.constructor.SafeConstructor()
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                builder.construct_object(node)
            except _SCALAR_ERRORS:
                mark = node.start_mark
                tag = node.tag.replace(_TAG_PREFIX, "!!")
                return (
                    f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: "
                    f"{shown(node.value)} is not a valid {clip(tag)}"
                )
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(reversed(node.value))
        elif isinstance(node, yaml.MappingNode):
            stack.extend(child for pair in reversed(node.value) for child in reversed(pair))
    return f"{source}: invalid YAML: {clip(str(exc), 200)}"


def _marked_message(exc: yaml.MarkedYAMLError, source: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    problem = clip(exc.problem or exc.context or "not valid YAML", 200)
    detail = f" ({exc.context} at line {exc.context_mark.line + 1})" if (
        exc.context and exc.problem and exc.context_mark
    ) else ""
    return f"{where}: invalid YAML: {problem}{detail}"


def error_message(err: ErrorDetails, model: type[BaseModel] | None = None) -> str:
    """One pydantic error as plain words, without pydantic's prefixes and URLs."""
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        owner = _model_at(model, loc[:-1]) if model is not None else None
        if owner is None:
            return "unknown field"
        noun = getattr(owner, "unknown_key_noun", "field")
        allowed = ", ".join(owner.model_fields)
        return f"unknown {noun} {shown(loc[-1])} ({noun}s: {allowed})"
    message = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = clip(message, 300)  # our own messages quote values clipped; this is a backstop
    value = err.get("input")
    if kind not in _SELF_EXPLAINING and (value is None or isinstance(value, str | int | float)):
        message = f"{message}, got {shown(value)}"
    return message


def _model_at(model: type[BaseModel], loc: KeyPath) -> type[BaseModel] | None:
    """The model class that validates the value at ``loc`` under ``model``, if one does."""
    current: Any = model
    for part in loc:
        owner = _unwrap_model(current)
        if isinstance(part, str) and isinstance(owner, type) and issubclass(owner, BaseModel):
            field = owner.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
            continue
        current = _item_type(current)
        if current is None:
            return None
    found = _unwrap_model(current)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _unwrap_model(annotation: Any) -> Any:
    """``X | None``, ``Annotated[X, ...]`` -> ``X`` when ``X`` is a model; else unchanged."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap_model(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _unwrap_model(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return annotation


def _item_type(annotation: Any) -> Any:
    """The item type of a list, tuple or dict annotation (through ``| None``), else None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _item_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _item_type(arg)
            if inner is not None:
                return inner
        return None
    args = typing.get_args(annotation)
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None

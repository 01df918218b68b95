"""Loading Settings from their layers, and writing them back out as YAML.

Precedence, lowest first:

1. the defaults in ``gliding.config.settings``;
2. a config file: the ``path`` given, else ``$GLIDING_CONFIG``, else ``./config.yaml`` if the
   current directory has one;
3. environment variables ``GLIDING_<KEY>`` with ``__`` between nested keys, case-insensitive
   (``GLIDING_LLM__LOCAL__N_CTX=2048``); tuples take a comma list
   (``GLIDING_TOOLS__ENV_ALLOW=PATH,HOME``); an empty value sets an optional key to null;
4. ``overrides`` from the CLI, by dotted key (``{"llm.model": "gpt-4o-mini"}``).

Each layer is validated as it is added, so an error names where the bad value came from: the
file with key and line, the environment variable, or the override. A relative ``data_dir``
from the file is anchored at the file's directory; from anywhere else (the default included)
at the current directory, so loaded Settings always hold an absolute ``data_dir``.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gliding.config.settings import Settings
from gliding.config.yamlsource import (
    MAX_PROBLEMS,
    USER_FILE_MAX_BYTES,
    bounded_problems,
    describe_validation_error,
    error_message,
    format_key_path,
    line_for,
    load_yaml_with_lines,
    nul_byte_at,
    read_yaml_text,
    shown,
)
from gliding.errors import ConfigError

ENV_PREFIX = "GLIDING_"
CONFIG_ENV_VAR = "GLIDING_CONFIG"
NOT_SETTINGS = frozenset({
    CONFIG_ENV_VAR,  # which config file (above)
    "GLIDING_HOME",  # where roles/ and constitutions/ are (gliding.agents.roles)
    "GLIDING_VENV", "GLIDING_WHEEL_CACHE",  # scripts/setup.sh
})
"""``GLIDING_*`` variables that are not settings."""
DEFAULT_CONFIG_NAME = "config.yaml"

_HINT = "see docs/config.md for every key"

KeyPath = tuple[str, ...]


def load_settings(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Settings from defaults < config file < ``GLIDING_*`` variables < ``overrides``.

    ``env`` defaults to ``os.environ``. Override values are taken as they are (``None`` sets an
    optional key to null), except that a string for a tuple key is split at commas.

    Raises:
        ConfigError: the config file is missing (when named), unreadable, larger than 256 KiB,
            not YAML or not a mapping; or a key is unknown or a value invalid in any layer. The
            message names the file and line, the environment variable, or the override key,
            and lists at most 20 problems.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    data: dict[str, Any] = {}
    config_path = _config_path(path, environ)
    if config_path is not None:
        data = _read_config_file(config_path)

    entries = _env_entries(environ)
    for _, keys, value in entries:
        _set(data, keys, value)
    _validate(data, entries)

    entries = []
    for key, raw in (overrides or {}).items():
        keys, annotation = _resolve(key.split("."), f"override {key}")
        entries.append((f"override {key}={shown(raw)}", keys,
                        _anchor(keys, _coerce(annotation, raw))))
        _set(data, keys, entries[-1][2])
    settings = _validate(data, entries)

    if not settings.data_dir.is_absolute():
        settings = settings.model_copy(update={"data_dir": (Path.cwd() / settings.data_dir)})
    return settings.model_copy(update={"data_dir": settings.data_dir.resolve()})


def settings_as_yaml(settings: Settings) -> str:
    """``settings`` as a config file that ``load_settings`` reads back to equal Settings.

    A relative ``data_dir`` stays relative, so it reads back equal from a file in the current
    directory; Settings from ``load_settings`` hold an absolute one and read back equal from
    anywhere.
    """
    data = settings.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def settings_keys(model: type[BaseModel] = Settings) -> list[KeyPath]:
    """Every leaf key of ``model`` as a path, in declaration order: ``("llm", "local", "seed")``."""
    keys: list[KeyPath] = []
    for name, field in model.model_fields.items():
        section = _section(field.annotation)
        if section is None:
            keys.append((name,))
        else:
            keys.extend((name, *rest) for rest in settings_keys(section))
    return keys


def env_var_name(keys: KeyPath) -> str:
    """The variable that sets ``keys``: ``("llm", "model")`` -> ``GLIDING_LLM__MODEL``."""
    return ENV_PREFIX + "__".join(keys).upper()


# --- layers -------------------------------------------------------------------------------------


def _config_path(path: Path | None, environ: Mapping[str, str]) -> Path | None:
    if path is not None:
        return Path(path)
    named = environ.get(CONFIG_ENV_VAR)
    if named:
        if not Path(named).exists():
            raise ConfigError(
                f"{named}: config file not found (named by {CONFIG_ENV_VAR})",
                hint=f"fix or unset {CONFIG_ENV_VAR}",
            )
        return Path(named)
    default = Path(DEFAULT_CONFIG_NAME)
    return default if default.is_file() else None


def _read_config_file(path: Path) -> dict[str, Any]:
    source = str(path)
    text = read_yaml_text(path, what="config file", error=ConfigError,
                          max_bytes=USER_FILE_MAX_BYTES)
    data, lines = load_yaml_with_lines(text, source, error=ConfigError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}:{lines[()]}: a config file is a mapping of keys (llm, tools, ...), "
            f"not a {type(data).__name__}",
            hint=_HINT,
        )
    nul = nul_byte_at(data)  # no path, command or model string can hold one
    if nul is not None:
        raise ConfigError(f"{source}:{line_for(nul, lines)}: {format_key_path(nul)}: a NUL "
                          "byte (\\0) is not allowed in a config file", hint=_HINT)
    _null_sections_are_empty(data, Settings)
    if "data_dir" in data:
        data["data_dir"] = _anchor(("data_dir",), data["data_dir"], path.parent)
    try:
        Settings.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, source, lines, model=Settings)
        raise ConfigError(message, hint=_HINT) from exc
    return data


def _env_entries(environ: Mapping[str, str]) -> list[tuple[str, KeyPath, Any]]:
    """``(label, key path, value)`` for every ``GLIDING_*`` variable but ``NOT_SETTINGS``.

    Values come shaped for validation: comma lists split, empty optionals null, a relative
    ``data_dir`` anchored at the current directory.
    """
    entries: list[tuple[str, KeyPath, Any]] = []
    claimed: dict[KeyPath, str] = {}
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NOT_SETTINGS:
            continue
        parts = upper[len(ENV_PREFIX) :].lower().split("__")
        keys, annotation = _resolve(parts, f"environment variable {name}")
        if keys in claimed:
            raise ConfigError(
                f"environment variables {claimed[keys]} and {name} both set "
                f"{format_key_path(keys)}",
                hint="unset one of them",
            )
        claimed[keys] = name
        raw = environ[name]
        value = None if raw == "" and _optional(annotation) else _coerce(annotation, raw)
        entries.append((f"environment variable {name}={shown(raw)}", keys,
                        _anchor(keys, value)))
    return entries


def _validate(data: dict[str, Any], labelled: list[tuple[str, KeyPath, Any]]) -> Settings:
    """Validate ``data``; blame each error on the labelled entry whose key it falls under."""
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = []
        for err in errors[:MAX_PROBLEMS]:
            loc = tuple(str(part) for part in err["loc"])
            label = next(
                (text for text, keys, _ in labelled if loc[: len(keys)] == keys), "settings"
            )
            problems.append(f"{label}: {format_key_path(loc)}: {error_message(err, Settings)}")
        raise ConfigError(bounded_problems(problems, len(errors)), hint=_HINT) from exc


# --- keys and values ----------------------------------------------------------------------------


def _resolve(parts: list[str], what: str) -> tuple[KeyPath, Any]:
    """The key path and leaf annotation that ``parts`` name in Settings.

    Raises:
        ConfigError: a part is not a key there, or the parts stop at a section or run past
            a leaf.
    """
    model: type[BaseModel] = Settings
    for index, part in enumerate(parts):
        field = model.model_fields.get(part)
        here = tuple(parts[:index])
        if field is None:
            where = f"in {format_key_path(here)}" if here else "at the top level"
            raise ConfigError(
                f"{what}: unknown setting {format_key_path(parts[: index + 1])} "
                f"(keys {where}: {', '.join(model.model_fields)})",
                hint=_HINT,
            )
        section = _section(field.annotation)
        last = index == len(parts) - 1
        if section is None and not last:
            raise ConfigError(
                f"{what}: {format_key_path(parts[: index + 1])} is a value, not a section",
                hint=_HINT,
            )
        if section is not None and last:
            raise ConfigError(
                f"{what}: {format_key_path(parts)} is a section; set one of its keys "
                f"({', '.join(section.model_fields)})",
                hint=_HINT,
            )
        if section is not None:
            model = section
        else:
            return tuple(parts), field.annotation
    raise ConfigError(f"{what}: names no setting", hint=_HINT)


def _section(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _optional(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def _coerce(annotation: Any, value: Any) -> Any:
    """A comma list for tuple keys given a string; anything else unchanged."""
    if typing.get_origin(annotation) is tuple and isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _anchor(keys: KeyPath, value: Any, base: Path | None = None) -> Any:
    """A relative ``data_dir`` made absolute against ``base`` (default: the current directory);
    other values unchanged."""
    if keys != ("data_dir",) or not isinstance(value, str | Path) or not str(value).strip():
        return value
    try:
        path = Path(value).expanduser()
    except RuntimeError as exc:  # ~user that does not exist
        raise ConfigError(f"data_dir: cannot expand {shown(str(value))}: {exc}",
                          hint=_HINT) from exc
    return str(path if path.is_absolute() else ((base or Path.cwd()) / path).resolve())


def _set(data: dict[str, Any], keys: KeyPath, value: Any) -> None:
    for key in keys[:-1]:
        inner = data.get(key)
        if not isinstance(inner, dict):
            inner = {}
            data[key] = inner
        data = inner
    data[keys[-1]] = value


def _null_sections_are_empty(data: dict[str, Any], model: type[BaseModel]) -> None:
    """``llm:`` with every key commented out means the defaults, not an error."""
    for name, field in model.model_fields.items():
        section = _section(field.annotation)
        if section is None or name not in data:
            continue
        if data[name] is None:
            data[name] = {}
        if isinstance(data[name], dict):
            _null_sections_are_empty(data[name], section)

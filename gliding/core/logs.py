"""What the front doors write on stderr: structlog set up once (console or JSON lines at the
configured level), the lines meant for the person at the terminal (``say``), and text made
safe to show.

With ``log_format: json`` every line on stderr is one JSON object: log lines, the messages
``say`` writes (progress, errors, notes), and records of the standard ``logging`` module that
libraries write (which would otherwise reach stderr as plain text). With ``console`` each is
plain text, and control characters in it are shown escaped (``terminal_safe``): text a model
wrote cannot move the cursor, recolour the terminal or overwrite a line.

A log line's exception (``exc_info``) becomes plain text in both formats
(``gliding.core.text.traceback_text``): the innermost frames only, no locals, bounded in size.
A traceback rendered with every frame's locals (structlog's default with rich installed) runs
to thousands of lines and takes seconds, on whatever thread logs it: a daemon's event loop.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import MutableMapping
from typing import Any

import structlog

from gliding.core.text import traceback_text

# C0 and C1 controls and DEL (ESC [ ..., OSC, \r, backspace, ...), and the Unicode characters
# that reorder or break what follows them (bidi overrides and isolates, line separators).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                      "\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b", "\b": "\\b"}
_STDLIB_MARK = "_gliding_json"  # the attribute that marks our handler on the root logger


def terminal_safe(text: str, *, one_line: bool = True) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``, ...).

    ``one_line``: newlines and tabs too, so text of many lines cannot start a line of its own
    (and so pass for a line of the report). Otherwise newlines and tabs stay.
    """
    keep = "" if one_line else "\n\t"

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep:
            return char
        if char in _NAMED:
            return _NAMED[char]
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(escape, text)


def json_line(data: dict[str, Any]) -> str:
    """``data`` as one line of JSON, ASCII only (so no raw control character can be in it)."""
    return json.dumps(data, ensure_ascii=True, default=str, separators=(", ", ": "))


def say(text: str, *, fmt: str, event: str = "cli.message", level: str = "info",
        **data: Any) -> None:
    """One line for the person at the terminal, on stderr: ``text`` made safe (console), or a
    JSON object with ``event``, ``level``, ``message`` and ``data`` (json)."""
    if fmt == "json":
        line = json_line({"event": event, "level": level, "timestamp": _now(),
                          "message": text, **data})
    else:
        line = terminal_safe(text, one_line=False)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def configure_logging(level: str, fmt: str) -> None:
    json_format = fmt == "json"
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    if json_format:
        processors += [_exception_text,
                       structlog.processors.JSONRenderer()]  # ensure_ascii: no raw controls
    else:
        processors += [_escape_values, _exception_text, structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.WARNING)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_stdlib_logging(level if json_format else None)


def _escape_values(logger: Any, name: str,
                   event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Console log lines: string values shown with their control characters escaped."""
    for key, value in event.items():
        if isinstance(value, str) and key != "exception":  # _exception_text escapes that one
            event[key] = terminal_safe(value)
    return event


def _exception_text(logger: Any, name: str,
                    event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``exc_info`` as a bounded plain traceback under ``exception`` (``traceback_text``);
    on the console with its control characters escaped, its newlines kept."""
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    if isinstance(exc_info, tuple):
        exc_info = exc_info[1]
    if isinstance(exc_info, BaseException):
        event["exception"] = traceback_text(exc_info)
    text = event.get("exception")
    if isinstance(text, str):
        event["exception"] = terminal_safe(text, one_line=False)
    return event


class _JSONRecords(logging.Handler):
    """Records of the ``logging`` module as JSON lines on (the current) stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = {"event": "log.record", "level": record.levelname.lower(),
                    "timestamp": _now(), "logger": record.name,
                    "message": record.getMessage()}
            if record.exc_info and record.exc_info[1] is not None:
                data["exception"] = traceback_text(record.exc_info[1])
            sys.stderr.write(json_line(data) + "\n")
        except Exception:  # noqa: BLE001 - a logging handler must not raise (logging.Handler's contract)
            self.handleError(record)


def _route_stdlib_logging(level: str | None) -> None:
    """JSON (``level`` given): the root logger writes JSON lines; else Python's default."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _STDLIB_MARK, False)]:
        root.removeHandler(handler)
    if level is None:
        return
    handler = _JSONRecords(getattr(logging, level.upper(), logging.WARNING))
    setattr(handler, _STDLIB_MARK, True)
    root.addHandler(handler)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

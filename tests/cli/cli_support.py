"""Running ``gliding``: in this process through typer's CliRunner, or as the installed console
script in a subprocess; either way with a clean environment and a cwd the test owns.

``invoke`` is the default for CLI tests: it is fast and runs the same typer app the console
script runs. ``run_cli`` starts the real console script (the one ``pip install -e .`` put next
to the running interpreter; ``python -m gliding.cli`` is not an entry point), which only a
subprocess can prove: the script exists, starts, writes raw bytes to a real stdout and exits
with the code. Both give a ``CLIResult`` and see an environment without ``GLIDING_*`` variables
(so the developer's own settings cannot leak in) plus whatever the test adds.

An in-process run changes process-wide state, and ``invoke`` puts all of it back afterwards:
``os.environ``, the cwd, the app's ``--config`` (``gliding.cli.common.state``), structlog's
configuration (each command configures logging to the runner's stderr), the handlers of the
standard ``logging`` root logger (``log_format: json`` adds one) and the contextvars bound to
log lines. Loggers are not cached on first use during the run, so no module-level
logger keeps the runner's (closed) stderr or log level for the tests that follow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from typer.testing import CliRunner

GLIDING = Path(sys.executable).parent / "gliding"
TIMEOUT_S = 120


def gliding_script() -> Path:
    """The console script; next to the interpreter in a venv, else on PATH."""
    if GLIDING.is_file():
        return GLIDING
    found = shutil.which("gliding")
    assert found, "the gliding console script is not installed (pip install -e .)"
    return Path(found)


@dataclass(frozen=True)
class CLIResult:
    code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GLIDING_")}
    env["COLUMNS"] = "200"  # typer/rich help output wraps at the terminal width
    env.update(extra or {})
    return env


def run_cli(args: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
            timeout: float = TIMEOUT_S, in_process: bool = False) -> CLIResult:
    """The console script in a subprocess (``in_process=True``: ``invoke`` instead)."""
    if in_process:
        return invoke(args, cwd=cwd, env=env)
    proc = subprocess.run(
        [str(gliding_script()), *args], cwd=cwd, env=clean_env(env), capture_output=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return CLIResult(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))


def invoke(args: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> CLIResult:
    """The typer app in this process, as the console script would run it from ``cwd``.

    An exception the app lets out is exit code 1 with its traceback on stderr, as Python
    prints it in a real process, so "no traceback" assertions mean the same in both modes.
    """
    from gliding.cli.app import app

    with _isolated(cwd, clean_env(env)):
        result = CliRunner().invoke(app, list(args), prog_name="gliding")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return CLIResult(result.exit_code, result.stdout_bytes, stderr)


@contextlib.contextmanager
def _isolated(cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    import gliding.core.logs as logs
    from gliding.cli.common import state as _state

    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    saved_state = dict(_state)
    saved_logging = structlog.get_config() if structlog.is_configured() else None
    saved_context = structlog.contextvars.get_contextvars()
    saved_handlers = list(logging.getLogger().handlers)
    configure_logging = logs.configure_logging

    def configure_uncached(level: str, fmt: str) -> None:
        configure_logging(level, fmt)
        structlog.configure(cache_logger_on_first_use=False)

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    _state.update(config=None)
    logs.configure_logging = configure_uncached
    try:
        yield
    finally:
        logs.configure_logging = configure_logging
        _restore_logging(saved_logging, saved_context)
        logging.getLogger().handlers[:] = saved_handlers
        _state.clear()
        _state.update(saved_state)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _restore_logging(config: Mapping[str, Any] | None, context: Mapping[str, Any]) -> None:
    structlog.reset_defaults()
    if config is not None:
        structlog.configure(**config)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**context)


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative, as text."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}

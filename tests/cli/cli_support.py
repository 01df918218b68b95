"""Running the installed ``gliding`` console script in a subprocess, with a clean environment.

Shared by the CLI tests and the settings-effect tests that need the CLI (logging). The script
next to the running interpreter is the one ``pip install -e .`` made; ``python -m gliding.cli``
is not an entry point. Every run gets an environment without ``GLIDING_*`` variables (so the
developer's own settings cannot leak in) plus whatever the test adds, and a cwd the test owns.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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
            timeout: float = TIMEOUT_S) -> CLIResult:
    proc = subprocess.run(
        [str(gliding_script()), *args], cwd=cwd, env=clean_env(env), capture_output=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return CLIResult(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative, as text."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}

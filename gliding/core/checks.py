"""Success checks of a task and their results: plain values, run by ``gliding.tools.checks``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FileExists:
    path: str
    kind: Literal["file_exists"] = "file_exists"

    def describe(self) -> str:
        return f"file {self.path} exists"

    def remedy(self) -> str:
        return f"Create the file {self.path}"


@dataclass(frozen=True)
class FileContains:
    path: str
    text: str
    kind: Literal["file_contains"] = "file_contains"

    def describe(self) -> str:
        return f"file {self.path} contains {self.text!r}"

    def remedy(self) -> str:
        return f"Write the file {self.path} containing the text {_quoted(self.text)}"


@dataclass(frozen=True)
class CommandSucceeds:
    command: str
    timeout_s: float = 60.0
    kind: Literal["command"] = "command"

    def describe(self) -> str:
        return f"command `{self.command}` exits 0"

    def remedy(self) -> str:
        return f"Make the command `{self.command}` exit 0"


def _quoted(text: str) -> str:
    return f'"{text}"' if '"' not in text else repr(text)


Check = FileExists | FileContains | CommandSucceeds


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one check with the evidence it rests on (file excerpt, exit code, output)."""

    check: Check
    passed: bool
    evidence: str
    expected: str | None = None

    @property
    def status(self) -> str:
        return "pass" if self.passed else "fail"

"""The one exception tree of Gliding; every error carries a code and a hint of what to do next.

    GlidingError                      exit 1 unless a subclass says otherwise
    ├── UsageError                    exit 2: the user asked for something malformed
    │   ├── TaskFileError             a task.yaml that does not validate (field + line)
    │   ├── ConfigError               a config.yaml or GLIDING_* variable that does not validate
    │   └── IRIError                  a string that is not a Gliding IRI
    ├── NotFoundError                 exit 3: an IRI or job that the archive does not hold
    ├── ToolError                     a tool refused or failed; sent back to the model, never fatal
    │   └── ConfinementError          a path that would leave the workspace
    ├── LLMError                      a model backend failed (network, bad reply, missing model)
    │   ├── ProviderError             a hosted model's call failed; ``kind`` says how (llm/faults)
    │   └── ProviderUnavailable       the model and its fallbacks stayed unreachable after every
    │                                 retry: the job stops interrupted; gliding resume goes on
    ├── ArchiveError                  the L0 archive could not be read or written
    ├── BudgetExceeded                a job or role budget (turns, tokens, cost, time) ran out
    ├── BusError                      the memory bus was closed or a message had the wrong type
    └── SandboxError                  exit 4: the command sandbox cannot run here

Exceptions never log; the CLI turns them into one message and an exit code.
"""

from __future__ import annotations


class GlidingError(Exception):
    """Root of every error Gliding raises on purpose."""

    code = "gliding.error"
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class UsageError(GlidingError):
    code = "usage"
    exit_code = 2


class TaskFileError(UsageError):
    code = "task.invalid"


class ConfigError(UsageError):
    code = "config.invalid"


class IRIError(UsageError):
    code = "iri.invalid"


class JobStateError(UsageError):
    """The job's state does not allow what was asked (cancel a finished job, answer an
    approval twice, ...)."""

    code = "job.state"


class NotFoundError(GlidingError):
    code = "not_found"
    exit_code = 3


class ToolError(GlidingError):
    """A tool call that cannot be carried out; its message goes back to the model as the result."""

    code = "tool.failed"


class ConfinementError(ToolError):
    code = "tool.confinement"


class LLMError(GlidingError):
    code = "llm.failed"


class ProviderError(LLMError):
    """One failed call of a hosted model: ``kind`` is one of ``gliding.llm.faults.KINDS``,
    ``status`` the HTTP status (None without an answer), ``retry_after_s`` what the provider
    asked to wait (None when it did not say)."""

    code = "llm.provider"

    def __init__(self, message: str, *, kind: str, status: int | None = None,
                 retry_after_s: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
        self.status = status
        self.retry_after_s = retry_after_s


class ProviderUnavailable(LLMError):
    """The model and every fallback failed on retryable faults until the retries ran out. Not
    the job's fault: it stops ``interrupted`` (not ``error``) and ``gliding resume`` continues
    it once the provider answers; ``job`` is set once the job is known."""

    code = "llm.unavailable"

    def __init__(self, message: str, *, hint: str | None = None, job: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.job = job
        self.reason = reason or message  # what failed, without the job's part of the message


class ArchiveError(GlidingError):
    code = "archive.failed"


class BudgetExceeded(GlidingError):
    code = "budget.exceeded"


class BusError(GlidingError):
    code = "bus.failed"


class SandboxError(GlidingError):
    """The sandbox the settings ask for cannot confine commands on this host: the job does not
    start."""

    code = "sandbox.unavailable"
    exit_code = 4

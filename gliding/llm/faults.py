"""Provider faults as values, and the pure decisions about them: which kind a failed model call
is, whether it is worth another try, and how long to wait first.

    kind = classify(("RateLimitError", "APIError"), status=429, message="...")  # rate_limited
    delay = retry_delay(kind, retry=1, policy=policy, jitter=rng.random(),
                        retry_after_s=2.0, spent_s=0.4, time_left_s=None)         # 2.0

Kinds and whether a call that failed so is tried again:

    rate_limited  429                                            retried; Retry-After honoured
    overloaded    529, Anthropic's overloaded_error              retried
    server        500, 502, 503, 504                             retried
    timeout       no answer within llm.timeout_s                 retried
    connection    refused, reset, closed without an answer or    retried
                  mid-way through a streamed one
    context_window  the prompt is over the model's window        not retried
    auth          401, 403: a missing or wrong API key           not retried
    not_found     404: no such model (or a wrong api_base)       not retried
    bad_request   400 and other 4xx: the request itself is wrong not retried
    other         anything else                                  not retried

The delay before retry *n* (1-based) is full jitter over an exponential ceiling,
``jitter * min(max_s, initial_s * 2**(n-1))``; a Retry-After the provider sent replaces it
(at most ``max_s``). There is no retry *n* when the model has had ``max_attempts`` calls, when
waiting would take the time spent on it past ``max_total_s``, or when the wait would not
end before the job's wall time budget does. Nothing here does I/O or reads a clock: the caller
passes the numbers in (``gliding/llm/resilient.py`` is the async shell).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from gliding.errors import ProviderError

RETRYABLE = frozenset({"rate_limited", "overloaded", "server", "timeout", "connection"})
KINDS = ("rate_limited", "overloaded", "server", "timeout", "connection", "context_window",
         "auth", "not_found", "bad_request", "other")

_LABELS = {
    "rate_limited": "rate limited", "overloaded": "overloaded", "server": "server error",
    "timeout": "timed out", "connection": "connection failed",
    "context_window": "prompt over the context window", "auth": "not authorised",
    "not_found": "model not found", "bad_request": "bad request", "other": "failed",
}
HINTS = {
    "auth": "set the provider's API key variable (llm.api_key_env names it, else litellm's "
            "default such as OPENAI_API_KEY or ANTHROPIC_API_KEY)",
    "not_found": "check the model string, and llm.api_base when it points at a server",
    "context_window": "use a model with a larger window, or lower "
                      "context.window.max_tokens",
    "bad_request": "the provider refused the request itself; log_level debug shows it",
    "other": "check the model string and the provider's API key variable",
}

# litellm's exception classes by name (most specific first); a status code decides otherwise
_BY_CLASS = (
    ("MidStreamFallbackError", "connection"),  # a stream broken off mid-way
    ("ContextWindowExceededError", "context_window"),
    ("RateLimitError", "rate_limited"),
    ("AuthenticationError", "auth"),
    ("PermissionDeniedError", "auth"),
    ("NotFoundError", "not_found"),
    ("Timeout", "timeout"),
    ("APITimeoutError", "timeout"),
    ("ServiceUnavailableError", "server"),
    ("InternalServerError", "server"),
    ("BadGatewayError", "server"),
    ("APIConnectionError", "connection"),
    ("BadRequestError", "bad_request"),
    ("UnprocessableEntityError", "bad_request"),
    ("ContentPolicyViolationError", "bad_request"),
)
_OVERLOADED = re.compile(r"overloaded", re.IGNORECASE)
_CONTEXT = re.compile(r"context[_ ]?(window|length)|maximum context|too many tokens|"
                      r"prompt is too long", re.IGNORECASE)
_CONNECTION = re.compile(r"connection (refused|reset|error|aborted)|disconnected without|"
                         r"server disconnected|connecterror|remoteprotocolerror|"
                         r"connection closed|"
                         r"broken pipe|name or service not known", re.IGNORECASE)
_TIMEOUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)


def classify(class_names: Sequence[str], status: int | None, message: str = "") -> str:
    """The kind (see the module) of a failed call: its exception's class names (the class and
    its bases), the HTTP status when there was one, and the error's text."""
    if status == 529 or _OVERLOADED.search(message):
        return "overloaded"
    if _CONTEXT.search(message) and status in (None, 400, 413):
        return "context_window"
    if status in (None, 500) and _CONNECTION.search(message):
        return "connection"  # litellm reports a dropped connection as a 500 it never got
    names = set(class_names)
    for name, kind in _BY_CLASS:
        if name in names:
            if kind == "bad_request" and status is not None and status >= 500:
                break  # litellm maps some 5xx bodies to BadRequest: the status decides
            return kind
    if status is not None:
        return _by_status(status)
    if _TIMEOUT.search(message):
        return "timeout"
    if _CONNECTION.search(message):
        return "connection"
    return "other"


def provider_error(model: str, exc: BaseException, now: float) -> ProviderError:
    """``exc``, an exception litellm raised for a call of ``model``, as a ProviderError: its
    kind (``classify`` over its class names, ``status_code`` and text), status, the
    Retry-After its response carried (``now``: ``time.time()``), and, for a kind not worth
    retrying, a hint of what to fix."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    raw = getattr(exc, "status_code", None)
    status = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 100 else None
    text = str(exc)
    kind = classify(names, status, text)
    if kind in ("timeout", "connection") or (kind == "overloaded" and status != 529):
        status = None  # litellm puts 500 (or 408) on errors that had no such answer
    retry_after = _retry_after(_headers(exc), now) if kind in RETRYABLE else None
    message = (f"{model}: {label(kind, status)}: {type(exc).__name__}: "
               f"{_one_line(_without_class(text, type(exc).__name__))}")
    return ProviderError(message, kind=kind, status=status, retry_after_s=retry_after,
                         hint=None if kind in RETRYABLE else HINTS.get(kind, HINTS["other"]))


def _headers(exc: BaseException) -> Mapping[str, Any]:
    """The response headers an exception carries (litellm keeps them in
    ``litellm_response_headers``; the SDKs' in ``response.headers``), names lower-case."""
    for source in (getattr(exc, "litellm_response_headers", None),
                   getattr(getattr(exc, "response", None), "headers", None),
                   getattr(exc, "headers", None)):
        if source is not None:
            try:
                return {str(k).lower(): v for k, v in dict(source).items()}
            except (TypeError, ValueError):
                continue
    return {}


def _retry_after(headers: Mapping[str, Any], now: float) -> float | None:
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except (TypeError, ValueError):
            value = math.nan
        if math.isfinite(value):
            return max(0.0, value)
    raw = headers.get("retry-after")
    return parse_retry_after(str(raw), now) if raw is not None else None


def _without_class(text: str, name: str) -> str:
    """``text`` without the class names litellm puts before it, once or twice
    (``litellm.ServiceUnavailableError: ServiceUnavailableError: ...``)."""
    prefix = re.compile(rf"^\s*(?:litellm\.)?{re.escape(name)}:\s*")
    while (shorter := prefix.sub("", text, count=1)) != text:
        text = shorter
    return text


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _by_status(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status in (408,):
        return "timeout"
    if status in (500, 502, 503, 504):
        return "server"
    if 400 <= status < 500:
        return "bad_request"
    return "other"


def retryable(kind: str) -> bool:
    return kind in RETRYABLE


def label(kind: str, status: int | None = None) -> str:
    """``429 rate limited``, ``timed out``: a kind as a progress line says it."""
    text = _LABELS.get(kind, kind)
    return f"{status} {text}" if status is not None else text


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks for: a number of seconds or an HTTP date
    (``now`` is the wall clock, ``time.time()``); None when absent or unreadable; never < 0."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one model is tried (``llm.retry``)."""

    max_attempts: int = 6  # calls of one model for one request, the first included
    initial_s: float = 1.0  # ceiling of the first retry's delay
    max_s: float = 30.0  # ceiling of any delay, a Retry-After's included
    max_total_s: float = 300.0  # seconds one model may take on one request, waits included
    cooldown_s: float = 60.0  # a model whose retries ran out is skipped this long (fallbacks)


def retry_delay(kind: str, *, retry: int, policy: RetryPolicy, jitter: float,
                retry_after_s: float | None = None, spent_s: float = 0.0,
                time_left_s: float | None = None) -> float | None:
    """Seconds to wait before retry number ``retry`` (1 = the second call), or None: give this
    model up (the kind is not retryable, or a bound in the module's list is reached).

    ``jitter`` is a number in [0, 1) (``random.random()``); ``spent_s`` the time this model
    has taken on the request so far; ``time_left_s`` what the job's wall time budget leaves
    (None: no budget).
    """
    if not retryable(kind) or retry >= policy.max_attempts or retry < 1:
        return None
    if retry_after_s is not None:
        delay = min(policy.max_s, max(0.0, retry_after_s))
    else:
        ceiling = min(policy.max_s, policy.initial_s * 2.0 ** min(retry - 1, 60))
        delay = min(max(jitter, 0.0), 1.0) * ceiling
    if spent_s + delay > policy.max_total_s:
        return None
    if time_left_s is not None and delay >= time_left_s:
        return None
    return delay

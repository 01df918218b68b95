"""gliding.llm.faults: which provider faults are retried, and how long a retry waits.

The classifier is fed what litellm's exceptions carry (class names, status, text); the delay
function is pure, so its bounds are properties checked over many inputs.
"""

from __future__ import annotations

import math
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding.errors import ProviderError
from gliding.llm.faults import (
    KINDS,
    RETRYABLE,
    RetryPolicy,
    classify,
    label,
    parse_retry_after,
    provider_error,
    retry_delay,
    retryable,
)

NOW = 1_800_000_000.0
POLICY = RetryPolicy(max_attempts=6, initial_s=1.0, max_s=30.0, max_total_s=300.0)


@pytest.mark.parametrize(("names", "status", "message", "kind"), [
    (["RateLimitError", "APIStatusError"], 429, "rate limit reached", "rate_limited"),
    (["APIError"], 429, "", "rate_limited"),
    (["InternalServerError"], 500, "boom", "server"),
    (["BadGatewayError"], 502, "", "server"),
    (["ServiceUnavailableError"], 503, "", "server"),
    (["APIError"], 504, "gateway timeout", "server"),
    (["APIError"], 529, "", "overloaded"),
    (["InternalServerError"], 500, '{"type":"overloaded_error","message":"Overloaded"}',
     "overloaded"),
    (["Timeout", "APITimeoutError", "APIConnectionError"], 408, "Request timed out.",
     "timeout"),
    (["APIConnectionError"], 500, "Connection error.", "connection"),
    (["ConnectError"], None, "[Errno 111] Connection refused", "connection"),
    (["RemoteProtocolError"], None, "Server disconnected without sending a response.",
     "connection"),
    (["BadRequestError"], 400, "invalid 'tools'", "bad_request"),
    (["ContextWindowExceededError", "BadRequestError"], 400, "too long", "context_window"),
    (["BadRequestError"], 400, "This model's maximum context length is 8192 tokens",
     "context_window"),
    (["AuthenticationError"], 401, "invalid x-api-key", "auth"),
    (["PermissionDeniedError"], 403, "", "auth"),
    (["NotFoundError"], 404, "model not found", "not_found"),
    (["BadRequestError"], 400, "LLM Provider NOT provided", "bad_request"),
    (["BadRequestError"], 503, "upstream unavailable", "server"),  # the status decides
    (["ValueError"], None, "something odd", "other"),
])
def test_classify_sorts_litellm_errors(names: list[str], status: int | None, message: str,
                                       kind: str) -> None:
    assert classify(names, status, message) == kind


def test_only_passing_trouble_is_retryable() -> None:
    assert {"rate_limited", "overloaded", "server", "timeout", "connection"} == RETRYABLE
    assert [k for k in KINDS if retryable(k)] == sorted(RETRYABLE, key=KINDS.index)
    assert label("rate_limited", 429) == "429 rate limited"
    assert label("timeout") == "timed out"


@pytest.mark.parametrize(("value", "seconds"), [
    ("3", 3.0), (" 2.5 ", 2.5), ("0", 0.0), ("-4", 0.0), ("soon", None), (None, None),
    ("nan", None), ("inf", None),
    (formatdate(NOW + 7, usegmt=True), 7.0), (formatdate(NOW - 60, usegmt=True), 0.0),
])
def test_retry_after_is_seconds_or_an_http_date(value: str | None,
                                                seconds: float | None) -> None:
    got = parse_retry_after(value, NOW)
    assert got == (pytest.approx(seconds, abs=1.0) if seconds is not None else None)


def test_the_delay_doubles_its_ceiling_and_jitter_spans_it() -> None:
    ceilings = [retry_delay("server", retry=n, policy=POLICY, jitter=0.999999)
                for n in range(1, 6)]
    assert ceilings == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0], rel=1e-5)
    assert retry_delay("server", retry=3, policy=POLICY, jitter=0.0) == 0.0
    assert retry_delay("server", retry=3, policy=POLICY, jitter=0.5) == 2.0


def test_the_ceiling_is_capped_by_max_s() -> None:
    policy = RetryPolicy(max_attempts=50, initial_s=1.0, max_s=5.0, max_total_s=1e6)
    assert retry_delay("server", retry=40, policy=policy, jitter=0.999) == pytest.approx(4.995)


def test_retry_after_replaces_the_drawn_wait_and_is_capped() -> None:
    assert retry_delay("rate_limited", retry=1, policy=POLICY, jitter=0.0,
                       retry_after_s=3.0) == 3.0
    assert retry_delay("rate_limited", retry=1, policy=POLICY, jitter=0.0,
                       retry_after_s=3600.0) == POLICY.max_s


def test_no_retry_past_max_attempts_or_for_a_kind_not_worth_it() -> None:
    assert retry_delay("server", retry=5, policy=POLICY, jitter=0.5) is not None
    assert retry_delay("server", retry=6, policy=POLICY, jitter=0.5) is None  # 6 calls made
    assert retry_delay("server", retry=1, policy=RetryPolicy(max_attempts=1),
                       jitter=0.5) is None
    for kind in ("auth", "bad_request", "not_found", "context_window", "other"):
        assert retry_delay(kind, retry=1, policy=POLICY, jitter=0.5) is None


def test_no_wait_past_max_total_s_or_the_wall_budget() -> None:
    assert retry_delay("server", retry=1, policy=POLICY, jitter=0.5, spent_s=299.6) is None
    assert retry_delay("server", retry=1, policy=POLICY, jitter=0.5, spent_s=299.4) == 0.5
    assert retry_delay("rate_limited", retry=1, policy=POLICY, jitter=0.0, retry_after_s=10,
                       time_left_s=9.9) is None
    assert retry_delay("rate_limited", retry=1, policy=POLICY, jitter=0.0, retry_after_s=10,
                       time_left_s=10.5) == 10.0


@given(kind=st.sampled_from(KINDS), retry=st.integers(-3, 200),
       jitter=st.floats(0.0, 1.0, exclude_max=True),
       retry_after=st.none() | st.floats(-10, 1e6, allow_nan=False),
       spent=st.floats(0, 1e4, allow_nan=False),
       left=st.none() | st.floats(0, 1e4, allow_nan=False),
       initial=st.floats(0.001, 600, allow_nan=False),
       max_s=st.floats(0.001, 3600, allow_nan=False),
       attempts=st.integers(1, 100))
def test_every_delay_is_within_its_bounds(kind: str, retry: int, jitter: float,
                                          retry_after: float | None, spent: float,
                                          left: float | None, initial: float, max_s: float,
                                          attempts: int) -> None:
    policy = RetryPolicy(max_attempts=attempts, initial_s=initial, max_s=max_s,
                         max_total_s=300.0)
    delay = retry_delay(kind, retry=retry, policy=policy, jitter=jitter,
                        retry_after_s=retry_after, spent_s=spent, time_left_s=left)
    if delay is None:
        return
    assert retryable(kind) and 1 <= retry < attempts
    assert math.isfinite(delay) and 0.0 <= delay <= max_s
    assert spent + delay <= 300.0
    assert left is None or delay < left
    if retry_after is None:
        assert delay <= initial * 2.0 ** (retry - 1) + 1e-9


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class RateLimitError(Exception):  # named as litellm's class is: the name is what counts
    status_code = 429

    def __init__(self, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.response = _Response(headers)


class AuthenticationError(Exception):
    status_code = 401


def test_provider_error_reads_status_and_retry_after_from_the_exception() -> None:
    error = provider_error("openai/x", RateLimitError("slow down", {"Retry-After": "4"}), NOW)
    assert isinstance(error, ProviderError)
    assert (error.kind, error.status, error.retry_after_s) == ("rate_limited", 429, 4.0)
    assert error.message.startswith("openai/x: 429 rate limited: RateLimitError: slow down")
    assert error.hint is None

    ms = provider_error("m", RateLimitError("x", {"retry-after-ms": "1500"}), NOW)
    assert ms.retry_after_s == 1.5
    dated = provider_error("m", RateLimitError("x", {
        "retry-after": formatdate(NOW + 20, usegmt=True)}), NOW)
    assert dated.retry_after_s == pytest.approx(20, abs=1)


def test_provider_error_of_a_fault_not_worth_retrying_has_a_hint() -> None:
    error = provider_error("anthropic/x", AuthenticationError("invalid x-api-key"), NOW)
    assert (error.kind, error.status, error.retry_after_s) == ("auth", 401, None)
    assert error.hint is not None and "API key" in error.hint


def test_provider_error_names_the_class_once() -> None:
    text = "litellm.RateLimitError: RateLimitError: OpenAIException - slow down"
    error = provider_error("openai/x", RateLimitError(text, {}), NOW)
    assert error.message == ("openai/x: 429 rate limited: RateLimitError: "
                             "OpenAIException - slow down")

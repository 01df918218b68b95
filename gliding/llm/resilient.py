"""A model that rides out provider faults: each call is retried with backoff on the faults worth
retrying, then handed to the next fallback model; when every model has failed so, the call
raises ProviderUnavailable, which stops the job ``interrupted`` (resumable), not ``error``.

    llm = ResilientLLM([HostedLLM("anthropic/claude-x"), HostedLLM("openai/gpt-x")],
                       RetryPolicy(max_attempts=6))

The decisions (which fault is retryable, how long to wait) are ``gliding.llm.faults``'s pure
functions; this is the async shell around them, with the sleep, the clock and the random
source injectable so that tests run on virtual time. Only a ``ProviderError`` (a hosted call's
translated failure) is retried; one whose kind is not retryable (400, 401/403, 404, a prompt
over the context window) is raised at once, as is any other LLMError (a missing local model
file, a scripted model out of replies): those are not the provider's passing trouble.

Each retry and each fallback is told to ``request.notify`` (a ``ProviderNotice``) before the
wait, so the agent loop can show it as it happens; the Completion names the model that
answered. The job's wall time budget (``request.time_left_s``) bounds the waits: no wait that
would end past it. A model whose retries ran out is skipped by the calls of the next
``policy.cooldown_s`` seconds while a later model is there to try (as litellm's router cools a
deployment down), so an outage costs each later call nothing; when every model is cooling
down, all are tried again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio
import structlog

from gliding.core.messages import Completion
from gliding.errors import ProviderError, ProviderUnavailable
from gliding.llm.faults import RetryPolicy, label, retry_delay, retryable
from gliding.llm.port import LLM, LLMRequest, ProviderNotice

log = structlog.get_logger("gliding.llm")

RESUME_HINT = ("the job is interrupted, not lost: run `gliding resume JOB` once the provider "
               "answers (archived turns and tool results are replayed, not run again)")


class ResilientLLM:
    """``models[0]`` with retries, then each of ``models[1:]`` in turn (see the module)."""

    def __init__(self, models: Sequence[LLM], policy: RetryPolicy | None = None, *,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
                 monotonic: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        if not models:
            raise ValueError("ResilientLLM needs at least one model")
        self.models = tuple(models)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._down_until: dict[int, float] = {}  # model index -> when it is tried again

    @property
    def name(self) -> str:
        return self.models[0].name

    async def complete(self, request: LLMRequest) -> Completion:
        """The first model's answer, or a fallback's.

        Raises:
            ProviderError: a fault that is not worth retrying (bad request, auth, no such
                model, context window); raised at once, fallbacks untried.
            ProviderUnavailable: every model failed on retryable faults until its retries
                ran out.
            LLMError: any other failure of a backend, as it came.
        """
        deadline = (self._monotonic() + request.time_left_s
                    if request.time_left_s is not None else None)
        failures: list[str] = []
        last: ProviderError | None = None
        start = self._monotonic()
        live = [i for i in range(len(self.models))
                if self._down_until.get(i, float("-inf")) <= start]
        if not live:
            live = list(range(len(self.models)))  # all cooling down: try them all again
        for index in live:
            model = self.models[index]
            began = self._monotonic()
            retry = 0
            while True:
                try:
                    completion = await model.complete(request)
                    self._down_until.pop(index, None)
                    return completion
                except ProviderError as exc:
                    if not retryable(exc.kind):
                        raise
                    last = exc
                now = self._monotonic()
                retry += 1
                fault = label(last.kind, last.status)
                delay = retry_delay(last.kind, retry=retry, policy=self.policy,
                                    jitter=self._rng.random(), retry_after_s=last.retry_after_s,
                                    spent_s=now - began,
                                    time_left_s=None if deadline is None else deadline - now)
                if delay is None:
                    failures.append(f"{model.name}: {fault} ({retry} call(s) in "
                                    f"{now - began:.1f}s)")
                    self._down_until[index] = now + self.policy.cooldown_s
                    break
                log.info("llm.retry", model=model.name, fault=fault, retry=retry,
                         delay_s=round(delay, 3), role=request.meta.get("role"))
                await _tell(request, ProviderNotice("retry", model.name, fault, retry,
                                                    self.policy.max_attempts - 1, delay))
                await self._sleep(delay)
            if index != live[-1]:
                following = self.models[live[live.index(index) + 1]].name
                log.warning("llm.fallback", model=model.name, fault=fault, next=following,
                            role=request.meta.get("role"))
                await _tell(request, ProviderNotice("fallback", model.name, fault,
                                                    next_model=following))
        assert last is not None
        raise ProviderUnavailable(
            "no model answered: " + "; ".join(failures) + f"; last error: {last.message}",
            hint=RESUME_HINT) from last


async def _tell(request: LLMRequest, notice: ProviderNotice) -> None:
    if request.notify is not None:
        await request.notify(notice)

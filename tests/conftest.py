"""Suite-wide guardrails: no test reaches the Hugging Face hub, no test leaves structlog
configured for the next one, no callback blocks an event loop, and Hypothesis has no deadline
in CI.

A blocked event loop fails the test. Every asyncio callback (``Handle._run``, which runs task
steps too) and every trio task step (an instrument added to each ``trio.run``) is timed, in any
thread and under any runner: anyio's pytest plugin, ``anyio.run`` inside a sync test,
``autojump``'s virtual clock (the guard times real seconds, whatever the loop's clock says). A
step over ``_BLOCKED_S`` (100 ms) is an offence; the test ends in an error at teardown naming the
task or callback, how long it held the loop, how much of that was CPU, and the stack the loop's
thread had while it was blocked.

Why not asyncio's debug mode (``slow_callback_duration``)? It covers asyncio only, its report
names the callback but not the line that blocked, and it costs: every handle and future records
its creation stack, and its extra checks (unclosed resources, calls from the wrong thread) change
what the suite tests. On ``tests/context tests/memory`` (1018 tests, two shared cores) a run in
debug mode took about 71 s of CPU and 86 s of wall time, a run with this guard 57-65 s and 75-80
s; the guard's own cost was within the noise between runs.

Load on a shared two-core machine must not read as blocking: a thread that is runnable but
waiting for a CPU looks, by wall time, just like a blocked one. So the guard does not use the
wall time alone. A watchdog thread looks every ``_POLL_S`` (20 ms) at each thread inside a step:
at its first look it reads the thread's ``/proc/self/task/<tid>/schedstat`` (CPU time and time
spent waiting on the run queue), and once the step passes 100 ms it samples the thread's stack
with ``sys._current_frames``. When the step ends, the loop thread reads schedstat again: time
spent on the run queue is load and is taken off; what remains is time the thread ran (a CPU-bound
callback) or slept (``time.sleep``, a lock, synchronous file, socket or subprocess I/O) with the
loop stopped behind it, and that is what must stay under 100 ms. When the watchdog never saw the
step (a long C call held the GIL, or the watchdog itself was starved), only the thread's CPU time
(``time.thread_time``, which load cannot inflate) is judged. Without schedstat (not Linux) only
CPU time is judged, so sleeping blocks go unseen there rather than load being blamed. A step whose
thread was sampled waiting in ``subprocess`` for a child it started to exec (asyncio starts
processes on the loop's thread) is judged by its CPU time too: that wait is the child's time on
a loaded machine's run queue, which the parent's schedstat does not count.

``_BLOCKING_ALLOWED`` names tests whose blocking is known and accepted, each with the reason; the
aim is to keep it empty.

pytest's own settings (markers, warnings as errors, the per-test timeout) are in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
import trio
from hypothesis import settings

# Property tests time each example; a shared CI machine can stall one past any deadline.
settings.register_profile("ci", deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Before anything imports huggingface_hub: the embedding model loads from the packaged files even
# under a bare `pytest` (scripts/test.sh exports it too). No test talks to the internet.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """A test that configures structlog (directly or through the CLI) does so for itself only."""
    saved = structlog.get_config() if structlog.is_configured() else None
    yield
    if (structlog.get_config() if structlog.is_configured() else None) != saved:
        structlog.reset_defaults()
        if saved is not None:
            structlog.configure(**saved)


# Test node ids whose event-loop blocking is known, each with the reason; kept empty when we can.
_BLOCKING_ALLOWED: dict[str, str] = {}

_BLOCKED_S = 0.1
_POLL_S = 0.02


def _run_queue_waits() -> dict[int, float] | None:
    """Seconds each thread of this process has spent runnable but waiting for a CPU (Linux
    schedstat); None where there is no such file."""
    waits = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat", "rb") as stat:
                    waits[int(tid)] = int(stat.read().split()[1]) / 1e9
            except FileNotFoundError:  # the thread ended in between
                continue
    except (OSError, ValueError, IndexError):
        return None
    return waits


class _GarbageCollection:
    """Seconds the cyclic garbage collector has run, in any thread: a pause no callback asked
    for (a full collection of this suite's heap can take most of a second on a loaded machine),
    so it is taken off every step it fell in."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started = 0.0
        gc.callbacks.append(self._phase)

    def _phase(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._started


_GC = _GarbageCollection()


@dataclass
class _Step:
    """One callback or task step in progress on some thread."""

    what: object  # the asyncio Handle or the trio Task
    started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.thread_time)
    gc_started: float = field(default_factory=lambda: _GC.spent)
    first_look: tuple[float, dict[int, float]] | None = None  # (wall, run-queue waits)
    stack: traceback.StackSummary | None = None


class _LoopGuard:
    """Times every step, lets a watchdog thread watch the long ones, keeps the offences."""

    def __init__(self) -> None:
        self._running: dict[int, _Step | None] = {}  # thread ident -> its step in progress
        self.offences: list[str] = []
        threading.Thread(target=self._watch, name="loop-guard", daemon=True).start()

    def begin(self, what: object) -> tuple[_Step | None, _Step]:
        """Time a step starting on this thread; hand the result to ``end`` when it is over."""
        ident = threading.get_ident()
        outer = self._running.get(ident)  # a loop run inside another loop's step
        step = self._running[ident] = _Step(what)
        return outer, step

    def end(self, outer: _Step | None, step: _Step) -> None:
        self._running[threading.get_ident()] = outer
        if time.perf_counter() - step.started > _BLOCKED_S:
            self._judge(step)

    def _watch(self) -> None:
        while True:
            time.sleep(_POLL_S)
            now = time.perf_counter()
            for ident, step in list(self._running.items()):
                if step is None:
                    continue
                if step.first_look is None:
                    waits = _run_queue_waits()
                    if waits is not None:
                        step.first_look = (time.perf_counter(), waits)
                elif step.stack is None and now - step.started > _BLOCKED_S:
                    frame = sys._current_frames().get(ident)
                    stack = traceback.extract_stack(frame) if frame is not None else None
                    if self._running.get(ident) is step:  # not a later step's stack
                        step.stack = stack

    def _judge(self, step: _Step) -> None:
        """Record ``step`` if the thread ran or slept (not waited for a CPU) for too long."""
        wall = time.perf_counter() - step.started
        collecting = _GC.spent - step.gc_started
        cpu = time.thread_time() - step.cpu_started
        blocked = cpu - collecting
        waits = _run_queue_waits()
        if step.first_look is not None and waits is not None:
            looked, before = step.first_look
            load = sum(wait - before.get(tid, 0.0) for tid, wait in waits.items())
            blocked = max(blocked, time.perf_counter() - looked - load - collecting)
        if blocked <= _BLOCKED_S or (cpu <= _BLOCKED_S and _spawning(step.stack)):
            return
        lines = [f"the event loop in thread {threading.current_thread().name} was blocked "
                 f"{blocked:.2f} s (of {wall:.2f} s; {cpu:.2f} s on a CPU) by {_name(step.what)}"]
        if step.stack is None:
            lines.append("  no stack sampled (a C call holding the GIL, or a starved watchdog)")
        else:
            lines.append(f"  stack after {_BLOCKED_S:.1f} s:")
            lines.extend(f"  {line}" for line in _callback_frames(step.stack).format())
        self.offences.append("\n".join(lines))


def _name(what: object) -> str:
    if isinstance(what, trio.lowlevel.Task):
        return f"trio task {what.name}"
    task = getattr(getattr(what, "_callback", None), "__self__", None)
    if not isinstance(task, asyncio.Task):
        return f"asyncio callback {what!r}"
    coro = task.get_coro()
    frame = getattr(coro, "cr_frame", None)
    where = f", now at {frame.f_code.co_filename}:{frame.f_lineno}" if frame else ""
    return f"asyncio task {task.get_name()} ({getattr(coro, '__qualname__', coro)}{where})"


def _spawning(stack: traceback.StackSummary | None) -> bool:
    """Whether the loop's thread was waiting, in ``subprocess``, for a child it started to
    exec (asyncio starts processes on the loop's thread: the wait is the child's, and it is on
    the run queue of a loaded machine, where the parent's schedstat cannot see it)."""
    return stack is not None and bool(stack) and stack[-1].name == "_execute_child" and \
        stack[-1].filename == subprocess.__file__


def _callback_frames(stack: traceback.StackSummary) -> traceback.StackSummary:
    """The frames below the loop's machinery: the callback's own code and what it called."""
    cut = 0
    for at, frame in enumerate(stack):
        if frame.name in ("unrolled_run", "_run_tests_and_fixtures") or (
                frame.name == "_run" and frame.filename == asyncio.events.__file__):
            cut = at + 1
    return traceback.StackSummary.from_list(stack[cut:][-30:])


_GUARD = _LoopGuard()
_handle_run = asyncio.events.Handle._run


def _guarded_handle_run(self: asyncio.Handle) -> None:
    outer, step = _GUARD.begin(self)
    try:
        _handle_run(self)
    finally:
        _GUARD.end(outer, step)


class _TrioSteps(trio.abc.Instrument):
    """Times each task step of one ``trio.run``."""

    def __init__(self) -> None:
        self._steps: dict[trio.lowlevel.Task, tuple[_Step | None, _Step]] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._steps[task] = _GUARD.begin(task)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        _GUARD.end(*self._steps.pop(task))


_trio_run = trio.run


def _guarded_trio_run(*args: Any, instruments: Sequence[trio.abc.Instrument] = (),
                      **kwargs: Any) -> Any:
    return _trio_run(*args, instruments=(*instruments, _TrioSteps()), **kwargs)


asyncio.events.Handle._run = _guarded_handle_run  # type: ignore[method-assign]
trio.run = _guarded_trio_run  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _event_loop_never_blocked(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test (and its fixtures) kept every event loop free; see the module docstring."""
    _GUARD.offences.clear()
    yield
    offences, _GUARD.offences[:] = list(_GUARD.offences), []
    if offences and request.node.nodeid not in _BLOCKING_ALLOWED:
        pytest.fail("\n".join(offences), pytrace=False)

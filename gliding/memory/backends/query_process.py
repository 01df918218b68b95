"""One query evaluated in a forked child process that really stops: at its deadline, or past its
memory bound.

pyoxigraph cannot interrupt ``Store.query`` (no cancellation token reaches Python, and the
evaluation runs without the GIL), so a query that is only no longer waited for keeps running and
allocating. ``evaluate_forked(work, ...)`` runs ``work`` — a function that evaluates the query and
returns its answer as bytes — in a child forked from this process:

- the child sees the store exactly as it is at the fork (copy-on-write: an in-memory store and
  RocksDB's state are shared, not copied), so a query reads every put that returned before it,
  on-disk and in-memory stores alike;
- the child caps itself with ``RLIMIT_AS`` at its address space at the fork plus
  ``memory_bytes`` (an allocation past it fails and the evaluator aborts), ``RLIMIT_CPU`` a
  little past the timeout (so it cannot outlive a parent that died) and ``RLIMIT_CORE`` 0; its
  stderr goes to /dev/null and faulthandler is off (an aborting evaluator prints there),
  SIGINT and SIGTERM get their default action and the parent's signal wakeup fd is dropped;
- it writes one length-prefixed answer to a pipe and leaves with ``os._exit``, so none of the
  parent's cleanup (atexit handlers, buffers, the store's destructor) runs in it;
- the parent waits on the pipe until the deadline; past it, or past ``max_bytes``, it kills
  the child (SIGKILL) and reaps it before raising, so when QueryTimeout or QueryTooLarge
  arrives the work and its memory are gone.

Why a fork and not a spawned worker that opens the store itself: ``Store.read_only`` next to a
writer is undefined behaviour by pyoxigraph's documentation and sees a frozen snapshot
(measured: 1000 of 1010 triples after a write); a consistent copy (``Store.backup`` plus a
read-only open) cost 45-95 ms per query and does not exist for in-memory stores. A fork costs
2-25 ms (its page tables grow with the process's resident memory) and reads the live state.

A fork of a multi-threaded process keeps only the forking thread: a lock another thread held at
that instant stays held in the child, forever. The caller passes as ``fork_lock`` the lock its
own uses of the store hold, so none is half-done at the fork; but the store has threads of its
own (RocksDB's flushes and compactions take the database mutex), and a child that inherits
that mutex held blocks in its first read (seen in 3 of about 1600 forks of the test suite,
which writes and then queries fresh stores). So the parent watches a child that has not
answered: asleep (``S`` in ``/proc/<pid>/stat``) with no CPU time gained for ``_STALL_S`` means
it waits for a lock nobody will release — a query that works burns CPU, a disk read sleeps in
``D`` — and it is killed and forked again, until the deadline. Never a wrong answer: a child
only reads and leaves without writing. (Python 3.12 and later warn, DeprecationWarning, about
forking a multi-threaded process; this is why it is safe here.)
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import resource
import select
import signal
import struct
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from gliding.memory.board.blackboard import BlackboardError, QueryError, QueryTimeout, QueryTooLarge

_HEADER = struct.Struct(">Q")  # the answer's length: one tag byte and the payload
_OK, _REFUSED, _NO_MEMORY, _FAILED, _TOO_LONG = b"K", b"Q", b"M", b"F", b"L"
_CHUNK = 1 << 20
_CPU_MARGIN_S = 2  # CPU seconds past the timeout before the child's own limit ends it
_POLL_S = 0.05  # how often the parent looks at a child that has not answered yet
_STALL_S = 0.25  # asleep this long without CPU time: blocked on a lock inherited from the fork


class _Stalled(Exception):
    """The child waits on a lock that was held when it was forked; fork another."""


def evaluate_forked(
    work: Callable[[], bytes],
    *,
    timeout_s: float,
    deadline: float,
    memory_bytes: int,
    max_bytes: int,
    fork_lock: contextlib.AbstractContextManager[object],
) -> bytes:
    """What ``work()`` returns, computed in a child process that has ended by ``deadline``.

    ``deadline`` is on ``time.monotonic()``; ``timeout_s`` words the errors and sizes the
    child's CPU limit. ``fork_lock`` is held while forking.

    Raises:
        QueryTimeout: the deadline passed; the child was killed and reaped.
        QueryTooLarge: the child needed more than ``memory_bytes`` more memory or answered more
            than ``max_bytes``; it was stopped and reaped.
        QueryError: ``work`` raised SyntaxError or ValueError (the query does not parse or
            evaluate).
        BlackboardError: ``work`` raised anything else, the child crashed, or no child could
            be started.
    """
    while True:
        read_end, write_end = os.pipe()
        try:
            with fork_lock:
                pid = os.fork()
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            raise BlackboardError(f"cannot start a query process: {exc}") from exc
        if pid == 0:
            _child(work, write_end, memory_bytes, int(timeout_s) + _CPU_MARGIN_S, max_bytes)
        os.close(write_end)
        child = _Child(pid, timeout_s, memory_bytes, max_bytes)
        try:
            return child.decode(child.answer(read_end, deadline))
        except _Stalled:
            continue  # that child was killed; the lock it waited for is free by now
        finally:
            os.close(read_end)


def _child(work: Callable[[], bytes], out: int, memory_bytes: int, cpu_s: int,
           max_bytes: int) -> NoReturn:
    """The forked side: confine itself, evaluate, write one answer, leave without cleanup."""
    try:
        _confine(memory_bytes, cpu_s)
        try:
            tag, payload = _OK, work()
            if len(payload) > max_bytes:
                tag, payload = _TOO_LONG, str(len(payload)).encode()
        except (SyntaxError, ValueError) as exc:
            tag, payload = _REFUSED, str(exc).encode("utf-8", "replace")
        except MemoryError:
            tag, payload = _NO_MEMORY, b""
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises BlackboardError
            tag, payload = _FAILED, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
        message = memoryview(_HEADER.pack(len(payload) + 1) + tag + payload)
        while message:
            message = message[os.write(out, message):]
        os.close(out)
    finally:
        os._exit(0)


def _confine(memory_bytes: int, cpu_s: int) -> None:
    gc.disable()  # a collection would touch, and so copy, every page of the parent's heap
    faulthandler.disable()  # an aborting evaluator is expected; its traceback is noise
    signal.set_wakeup_fd(-1)  # the parent's event loop must not hear the child's signals
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    mapped = _address_space()
    if mapped is not None:
        resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_bytes, mapped + memory_bytes))


def _address_space() -> int | None:
    """Bytes of address space this process maps now (Linux), or None where /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _Child:
    """The parent's side of one child: its answer by the deadline, or the child stopped."""

    def __init__(self, pid: int, timeout_s: float, memory_bytes: int, max_bytes: int) -> None:
        self.pid, self.timeout_s = pid, timeout_s
        self.memory_bytes, self.max_bytes = memory_bytes, max_bytes
        self.reaped = False
        self.status: int | None = None  # the wait status, once reaped here

    def answer(self, pipe: int, deadline: float) -> bytes:
        """The child's message (tag and payload), read from ``pipe`` by ``deadline``.

        Raises:
            _Stalled: the child sleeps on a lock inherited from the fork; it was stopped.
            QueryTimeout, QueryTooLarge, BlackboardError: as ``evaluate_forked``.
        """
        poller = select.poll()  # not select.select: a store may hold more than 1024 fds
        poller.register(pipe, select.POLLIN)
        watch = _StallWatch(self.pid)
        buffer = bytearray()
        exited = False  # the child is gone: read what is left in the pipe, then judge
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stop()
                    raise QueryTimeout(
                        f"the query ran past {self.timeout_s} s and was stopped",
                        hint="narrow the query (LIMIT, fewer unbound patterns) or raise "
                             "timeout_s")
                if poller.poll(0 if exited else min(remaining, _POLL_S) * 1000):
                    chunk = os.read(pipe, _CHUNK)
                    if not chunk:  # end of file: the child closed its end without answering
                        raise self.crashed()
                    buffer += chunk
                    message = self._complete(buffer)
                    if message is not None:
                        self._reap_later()
                        return message
                elif exited:
                    raise self.crashed()
                elif self._has_exited():
                    exited = True
                elif watch.stalled():
                    raise _Stalled
        finally:
            self.stop()

    def decode(self, message: bytes) -> bytes:
        """The payload of an answer; the error it stands for when it is not one."""
        tag, payload = message[:1], message[1:]
        if tag == _OK:
            return payload
        text = payload.decode("utf-8", "replace")
        if tag == _REFUSED:
            raise QueryError(f"the query does not parse or evaluate: {text}")
        if tag == _NO_MEMORY:
            raise self._too_much_memory()
        if tag == _TOO_LONG:
            raise self._too_long(f" ({text} bytes)")
        raise BlackboardError(f"the query failed: {text}")

    def crashed(self) -> BlackboardError:
        """The error for a child that ended without a whole answer."""
        status = self._wait()
        if status is not None and os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            name = signal.Signals(number).name if number in signal.valid_signals() else number
            if number in (signal.SIGABRT, signal.SIGKILL):  # a failed allocation; OOM killer
                return self._too_much_memory(f" (the evaluator ended with {name})")
            if number == signal.SIGXCPU:
                return QueryTimeout(f"the query used more than {self.timeout_s} s of CPU "
                                    "and was stopped", hint="narrow the query")
            return BlackboardError(f"the query process crashed ({name})",
                                   hint="narrow or simplify the query")
        return BlackboardError(f"the query process ended without an answer (status {status})")

    def stop(self) -> None:
        """Kill the child and wait until the kernel has taken it, and its memory, away."""
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._wait()

    def _complete(self, buffer: bytearray) -> bytes | None:
        """The message once all of it is in ``buffer``, else None."""
        if len(buffer) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(buffer)
        if length > self.max_bytes + 1:
            raise self._too_long("")
        if len(buffer) < _HEADER.size + length:
            return None
        return bytes(buffer[_HEADER.size: _HEADER.size + length])

    def _too_much_memory(self, detail: str = "") -> QueryTooLarge:
        return QueryTooLarge(
            f"the query needed more than {self.memory_bytes // 2**20} MiB of memory and was "
            f"stopped{detail}",
            hint="narrow the query: fewer unbound patterns, no ORDER BY or GROUP_CONCAT over "
                 "a large join")

    def _too_long(self, detail: str) -> QueryTooLarge:
        return QueryTooLarge(f"the query's answer{detail} is longer than {self.max_bytes} "
                             "bytes", hint="narrow the query: fewer variables, shorter values")

    def _has_exited(self) -> bool:
        """Whether the child has ended; reaps it (keeping its status) if so."""
        if self.reaped:
            return True
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.reaped = True
            return True
        if pid == 0:
            return False
        self.reaped, self.status = True, status
        return True

    def _wait(self) -> int | None:
        if not self.reaped:
            # ChildProcessError: reaped by someone else, its status is unknown
            with contextlib.suppress(ChildProcessError):
                self.status = os.waitpid(self.pid, 0)[1]
            self.reaped = True
        return self.status

    def _reap_later(self) -> None:
        """The child has answered and is exiting; take its status on another thread, since
        waiting here would wait for the kernel to tear its address space down."""
        self.reaped = True
        threading.Thread(target=_reap, args=(self.pid,), name="blackboard-query-reaper",
                         daemon=True).start()


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class _StallWatch:
    """Whether a child has slept, without gaining CPU time, for ``_STALL_S`` (Linux /proc)."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/stat"
        self.seen: tuple[str, int] | None = None
        self.since = 0.0

    def stalled(self) -> bool:
        sample = self._sample()
        now = time.monotonic()
        if sample is None or sample[0] != "S" or sample != self.seen:
            self.seen, self.since = sample, now
            return False
        return now - self.since >= _STALL_S

    def _sample(self) -> tuple[str, int] | None:
        """The child's state letter and its user plus system CPU ticks."""
        try:
            with open(self.path, "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            return fields[0].decode(), int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):  # gone, or no /proc: no judgement
            return None

"""Linearizability checking for histories of reads and writes on independent registers.

This module owns the checker the coherence benchmark runs over recorded histories: the
``Operation`` a client performed (which key, read or write, the value, when it was called and
when it returned), the register model (a key starts absent, ``None``; a write sets its value; a
read must return the current value), and ``check``, which decides whether some total order of the
operations respects real time (an operation that returned before another was called comes first)
and the register model.

Algorithm: Wing & Gong's search with Lowe's memoisation, the one Porcupine and Knossos use.

* P-compositionality: a history of independent registers is linearizable iff each key's
  sub-history is, so ``check`` partitions by key and searches each key on its own.
* Per key, every operation contributes a call and a return entry, sorted by time, in a doubly
  linked list. The search walks the list from the front: at a call entry it tries to linearize
  that operation next (legal under the model, and the configuration new); if so it lifts the
  operation's two entries out of the list and restarts from the front. Reaching a return entry
  means an operation that has already returned is still unplaced: backtrack (pop the last
  linearized operation, put its entries back, try the next call after it). The list empties:
  linearizable. Backtracking past the first operation: not linearizable.
* Lowe's memo: a configuration is the set of linearized operations (a bitset held in a Python
  int) plus the model state; a configuration seen before is never explored again, which keeps
  the search polynomial for the bounded concurrency a benchmark produces.
* The search is iterative (an explicit stack), so a long history cannot hit Python's recursion
  limit.

Choices worth knowing:

* Entries at the same instant: calls sort before returns, so intervals that merely touch count as
  concurrent. A coarse clock therefore never manufactures a violation.
* Pending operations (``ret is None``: the process died, the reply never came) return at
  +infinity. A pending write may take effect at any point after its call, or not at all (the
  search accepts once only returns at +infinity are left in the list, leaving unplaced pending
  writes out). A pending read returned nothing to check and is dropped.
* ``ok=False`` (the operation returned an error): a failed read is dropped like a pending one; a
  failed write is indeterminate (it may have reached the store before the error), so it is
  treated exactly like a pending write.
* A key whose search runs past ``timeout_s`` is reported in ``Result.timed_out_keys`` and makes
  ``Result.ok`` False: an unfinished check is not evidence of correctness, and a benchmark that
  silently passed it would hide the very histories that are hardest to get right.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Operation", "Result", "Violation", "check"]

# The search reads the clock once per this many steps (a power of two; the first step included).
_CLOCK_MASK = 1023


@dataclass(frozen=True)
class Operation:
    """One read or write a client performed on one key.

    ``value`` is the value written, or for a read the value it returned; ``None`` is the key's
    initial (absent) value, so a write of ``None`` deletes. ``call`` and ``ret`` are times on
    one clock shared by every client; ``ret=None`` means the call never returned. ``ok=False``
    means the call returned an error (see the module docstring for how both are treated).
    """

    client: str
    key: str
    kind: Literal["read", "write"]
    value: str | None
    call: float
    ret: float | None
    ok: bool = True


@dataclass(frozen=True)
class Violation:
    """A key whose sub-history has no linearization.

    ``operation`` is the first operation, by return time, that no linearization could place:
    every search path stopped at its return with it still unplaced. ``linearized`` is the
    partial linearization that got furthest before that happened (in linearization order).
    """

    key: str
    operation: Operation
    linearized: tuple[Operation, ...]

    def describe(self) -> str:
        """One line for a report: the key, the operation, and how far the search got."""
        op = self.operation
        return (
            f"key {self.key!r}: {op.kind} of {op.value!r} by {op.client!r} "
            f"[{op.call}, {op.ret}] cannot be linearized after "
            f"{len(self.linearized)} operation(s)"
        )


@dataclass(frozen=True)
class Result:
    """The verdict on a whole history.

    ``ok`` is True only when every key was checked to the end and found linearizable; a key in
    ``timed_out_keys`` makes it False. ``operations`` counts the operations given, including the
    pending and failed reads the check dropped.
    """

    ok: bool
    keys_checked: int
    operations: int
    violations: tuple[Violation, ...] = ()
    timed_out_keys: tuple[str, ...] = ()


def check(
    history: Sequence[Operation],
    *,
    timeout_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """Check ``history`` for linearizability against one register per key.

    ``timeout_s`` is the wall-clock budget of each key's search (``None``: unbounded); ``clock``
    is the time source for that budget (a fake in tests). Keys are checked in sorted order.

    Raises:
        ValueError: an operation with an unknown kind, a non-finite or NaN time, a return
            before its call, or a field of the wrong type; the message names the operation.
    """
    by_key: dict[str, list[Operation]] = {}
    for op in history:
        _validate(op)
        by_key.setdefault(op.key, []).append(op)
    violations: list[Violation] = []
    timed_out: list[str] = []
    for key in sorted(by_key):
        deadline = None if timeout_s is None else clock() + timeout_s
        outcome = _check_key(key, by_key[key], deadline, clock)
        if outcome == "timeout":
            timed_out.append(key)
        elif outcome is not None:
            violations.append(outcome)
    return Result(
        ok=not violations and not timed_out,
        keys_checked=len(by_key),
        operations=len(history),
        violations=tuple(violations),
        timed_out_keys=tuple(timed_out),
    )


def _validate(op: Operation) -> None:
    """Raise ``ValueError`` naming ``op`` if it cannot be part of a history."""
    if op.kind not in ("read", "write"):
        raise ValueError(f"unknown operation kind {op.kind!r} (expected 'read' or 'write'): {op}")
    if not isinstance(op.key, str) or not isinstance(op.client, str):
        raise ValueError(f"key and client must be strings: {op}")
    if op.value is not None and not isinstance(op.value, str):
        raise ValueError(f"value must be a string or None: {op}")
    if not isinstance(op.call, int | float) or not math.isfinite(op.call):
        raise ValueError(f"call time must be a finite number: {op}")
    if op.ret is not None:
        if not isinstance(op.ret, int | float) or not math.isfinite(op.ret):
            raise ValueError(f"return time must be a finite number, or None if pending: {op}")
        if op.ret < op.call:
            raise ValueError(f"operation returns ({op.ret}) before its call ({op.call}): {op}")


def _check_key(
    key: str,
    ops_in: list[Operation],
    deadline: float | None,
    clock: Callable[[], float],
) -> Violation | Literal["timeout"] | None:
    """Search one key's sub-history; ``None`` when it is linearizable."""
    # Pending and failed reads returned nothing to check; failed writes are indeterminate.
    ops = [op for op in ops_in if op.kind == "write" or (op.ok and op.ret is not None)]
    if not ops:
        return None
    n = len(ops)
    is_write = [op.kind == "write" for op in ops]
    values = [op.value for op in ops]
    events: list[tuple[float, int, int]] = []  # (time, 0 call / 1 return, op index)
    for i, op in enumerate(ops):
        events.append((op.call, 0, i))
        events.append((op.ret if op.ret is not None and op.ok else math.inf, 1, i))
    events.sort()

    # Dancing links over nodes 1..2n; node 0 is the head, -1 ends the list.
    size = 2 * n + 1
    nxt = list(range(1, size + 1))
    nxt[-1] = -1
    prv = list(range(-1, size - 1))
    is_call = [False] * size
    op_of = [0] * size
    at_infinity = [False] * size
    call_node = [0] * n
    ret_node = [0] * n
    for node, (when, is_ret, i) in enumerate(events, start=1):
        op_of[node] = i
        if is_ret:
            ret_node[i] = node
            at_infinity[node] = when == math.inf
        else:
            is_call[node] = True
            call_node[i] = node

    def lift(i: int) -> None:
        for node in (call_node[i], ret_node[i]):
            after = nxt[node]
            nxt[prv[node]] = after
            if after != -1:
                prv[after] = prv[node]

    def unlift(i: int) -> None:
        for node in (ret_node[i], call_node[i]):
            after = nxt[node]
            nxt[prv[node]] = node
            if after != -1:
                prv[after] = node

    state: str | None = None
    linearized = 0
    stack: list[tuple[int, str | None]] = []  # (op index, model state before it)
    seen: set[tuple[int, str | None]] = set()
    furthest = -1
    furthest_prefix: list[int] = []
    steps = 0
    node = nxt[0]
    while node != -1:
        if deadline is not None and steps & _CLOCK_MASK == 0 and clock() > deadline:
            return "timeout"
        steps += 1
        if is_call[node]:
            i = op_of[node]
            if is_write[i] or state == values[i]:
                new_state = values[i] if is_write[i] else state
                config = (linearized | (1 << i), new_state)
                if config not in seen:
                    seen.add(config)
                    stack.append((i, state))
                    state = new_state
                    linearized = config[0]
                    lift(i)
                    node = nxt[0]
                    continue
            node = nxt[node]
            continue
        # A return entry: its operation is still unplaced.
        if at_infinity[node]:
            return None  # only pending returns remain; unplaced pending writes never happened
        if node > furthest:
            furthest = node
            furthest_prefix = [j for j, _ in stack]
        if not stack:
            return Violation(
                key=key,
                operation=ops[op_of[furthest]],
                linearized=tuple(ops[j] for j in furthest_prefix),
            )
        i, state = stack.pop()
        linearized &= ~(1 << i)
        unlift(i)
        node = nxt[call_node[i]]
    return None

"""The linearizability checker (gliding.memory.coherence.linearizability): hand-written histories
with a known verdict, pending and failed operations, malformed input, a time budget on a fake
clock, property tests over histories a simulated atomic register produced, and a timing check
on a benchmark-sized history."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.memory.coherence import linearizability
from gliding.memory.coherence.linearizability import Operation, Result, Violation, check


def w(
    value: str | None,
    call: float,
    ret: float | None,
    *,
    key: str = "k",
    client: str = "c1",
    ok: bool = True,
) -> Operation:
    return Operation(client=client, key=key, kind="write", value=value, call=call, ret=ret, ok=ok)


def r(
    value: str | None,
    call: float,
    ret: float | None,
    *,
    key: str = "k",
    client: str = "c2",
    ok: bool = True,
) -> Operation:
    return Operation(client=client, key=key, kind="read", value=value, call=call, ret=ret, ok=ok)


def only_violation(result: Result) -> Violation:
    assert not result.ok
    assert len(result.violations) == 1
    return result.violations[0]


# --- linearizable histories ---------------------------------------------------------------


def test_sequential_history_is_linearizable() -> None:
    history = [
        w("x", 0, 1),
        r("x", 2, 3),
        w("y", 4, 5),
        r("y", 6, 7),
        w(None, 8, 9),
        r(None, 10, 11),
    ]
    result = check(history)
    assert result == Result(ok=True, keys_checked=1, operations=6)


def test_empty_history_is_linearizable() -> None:
    assert check([]) == Result(ok=True, keys_checked=0, operations=0)


def test_initial_value_is_none() -> None:
    assert check([r(None, 0, 1), w("x", 2, 3)]).ok


@pytest.mark.parametrize("seen", ["x", "y"])
def test_read_overlapping_a_write_sees_old_or_new_value(seen: str) -> None:
    history = [w("x", 0, 1), w("y", 2, 5), r(seen, 3, 4)]
    assert check(history).ok


def test_touching_intervals_count_as_concurrent() -> None:
    # The read is called at the instant the write returns: either order is allowed.
    assert check([w("x", 0, 1), r(None, 1, 2)]).ok


def test_concurrent_writes_ordered_consistently_by_reads() -> None:
    history = [
        w("x", 0, 10, client="c1"),
        w("y", 0, 10, client="c3"),
        r("x", 2, 3),
        r("y", 4, 5),
        r("y", 11, 12),
    ]
    assert check(history).ok


def test_long_sequential_key_needs_no_recursion() -> None:
    history = []
    for i in range(3000):
        history.append(w(str(i), 4 * i, 4 * i + 1))
        history.append(r(str(i), 4 * i + 2, 4 * i + 3))
    assert check(history).ok


# --- non-linearizable histories -----------------------------------------------------------


def test_stale_read_after_completed_write_is_a_violation() -> None:
    history = [w("x", 0, 1), w("y", 2, 3), r("x", 4, 5)]
    violation = only_violation(check(history))
    assert violation.key == "k"
    assert violation.operation == history[2]
    assert violation.linearized == (history[0], history[1])
    assert "cannot be linearized" in violation.describe()


def test_reads_in_real_time_order_seeing_new_then_old_is_a_violation() -> None:
    history = [w("x", 0, 1), w("y", 2, 10), r("y", 3, 4), r("x", 5, 6, client="c3")]
    violation = only_violation(check(history))
    assert violation.operation == history[3]


def test_reads_that_order_concurrent_writes_both_ways_are_a_violation() -> None:
    history = [
        w("x", 0, 10, client="c1"),
        w("y", 0, 10, client="c3"),
        r("y", 2, 3),
        r("x", 4, 5),
        r("y", 6, 7),
    ]
    assert only_violation(check(history)).operation == history[4]


def test_read_of_a_value_never_written_is_a_violation() -> None:
    history = [r("ghost", 0, 1)]
    violation = only_violation(check(history))
    assert violation.operation == history[0]
    assert violation.linearized == ()


def test_read_of_none_after_completed_write_is_a_violation() -> None:
    assert not check([w("x", 0, 1), r(None, 2, 3)]).ok


def test_violation_is_reported_for_its_own_key_only() -> None:
    history = [
        w("x", 0, 1, key="a"),
        r("x", 2, 3, key="a"),
        w("x", 0, 1, key="b"),
        w("y", 2, 3, key="b"),
        r("x", 4, 5, key="b"),
        w("z", 0, 5, key="c"),
        r(None, 1, 2, key="c"),
        r("z", 6, 7, key="c"),
    ]
    result = check(history)
    assert not result.ok
    assert result.keys_checked == 3
    assert result.operations == 8
    assert [v.key for v in result.violations] == ["b"]
    assert result.violations[0].operation == history[4]
    assert result.timed_out_keys == ()


# --- pending and failed operations ---------------------------------------------------------


def test_pending_write_later_read_is_fine() -> None:
    assert check([w("x", 0, None), r(None, 1, 2), r("x", 5, 6), r("x", 7, 8)]).ok


def test_pending_write_never_observed_is_fine() -> None:
    assert check([w("x", 0, None), r(None, 5, 6), w("y", 7, 8), r("y", 9, 10)]).ok


def test_read_of_pending_value_then_overwritten_is_fine() -> None:
    history = [w("x", 0, None, client="c1"), r("x", 1, 2), w("y", 3, 4), r("y", 5, 6)]
    assert check(history).ok


def test_pending_write_cannot_be_unobserved() -> None:
    history = [w("x", 0, None, client="c1"), r("x", 1, 2), r(None, 3, 4)]
    assert only_violation(check(history)).operation == history[2]


def test_pending_write_takes_effect_only_after_its_call() -> None:
    assert not check([r("x", 0, 1), w("x", 2, None)]).ok


def test_pending_and_failed_reads_are_dropped() -> None:
    history = [r("ghost", 0, None), r("ghost", 1, 2, ok=False), w("x", 3, 4), r("x", 5, 6)]
    result = check(history)
    assert result.ok
    assert result.operations == 4


def test_failed_write_is_indeterminate() -> None:
    # A write that returned an error may still have taken effect, even after its return.
    assert check([w("x", 0, 1, ok=False), r(None, 2, 3), r("x", 4, 5)]).ok
    assert check([w("x", 0, 1, ok=False), r(None, 2, 3)]).ok


# --- malformed input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (w("x", 5, 4), "before its call"),
        (Operation("c1", "k", "cas", "x", 0, 1), "unknown operation kind"),  # type: ignore[arg-type]
        (w("x", float("nan"), 1), "call time"),
        (w("x", 0, float("inf")), "return time"),
        (Operation("c1", "k", "write", 3, 0, 1), "value must be"),  # type: ignore[arg-type]
    ],
)
def test_malformed_operation_raises_value_error(op: Operation, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check([w("y", 0, 1), op])


# --- time budget -----------------------------------------------------------------------------


@dataclass
class SteppingClock:
    """A fake clock that moves one second each time it is read."""

    now: float = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_key_past_its_budget_is_reported_not_passed() -> None:
    history = [w("x", 0, 1, key="a"), r("x", 2, 3, key="a")]
    result = check(history, timeout_s=0.5, clock=SteppingClock())
    assert result == Result(ok=False, keys_checked=1, operations=2, timed_out_keys=("a",))


def test_generous_budget_changes_nothing() -> None:
    history = [w("x", 0, 1), w("y", 2, 3), r("x", 4, 5)]
    assert check(history, timeout_s=60.0) == check(history)


# --- histories of a simulated atomic register ----------------------------------------------


@dataclass(frozen=True)
class Step:
    """One planned operation of a client: gaps before its call, its effect and its return."""

    key: str
    kind: Literal["read", "write"]
    gap: float
    to_effect: float
    to_return: float
    pending: bool = False
    effected: bool = True  # for a pending write: whether it reached the store


def simulate(plans: list[list[Step]]) -> list[Operation]:
    """Run each client's steps against one atomic register per key.

    Each operation takes effect at one instant inside [call, ret], in effect-time order, so the
    history is linearizable by construction. A client stops after its first pending operation;
    a pending write reaches the store only if its step says so. Written values are unique.
    """
    planned: list[tuple[float, int, int, Operation, bool]] = []
    for c, steps in enumerate(plans):
        t = 0.0
        for j, step in enumerate(steps):
            call = t + step.gap
            effect = call + step.to_effect
            ret = effect + step.to_return
            value = f"c{c}.{j}" if step.kind == "write" else None
            op = Operation(
                client=f"c{c}",
                key=step.key,
                kind=step.kind,
                value=value,
                call=call,
                ret=None if step.pending else ret,
            )
            planned.append((effect, c, j, op, step.effected or not step.pending))
            t = ret
            if step.pending:
                break
    store: dict[str, str | None] = {}
    history: list[Operation] = []
    for _, _, _, op, effected in sorted(planned, key=lambda p: p[:3]):
        if op.kind == "write":
            if effected:
                store[op.key] = op.value
            history.append(op)
        else:
            history.append(replace(op, value=store.get(op.key)))
    return history


_times = st.integers(min_value=0, max_value=3).map(float)
_steps = st.builds(
    Step,
    key=st.sampled_from(["a", "b"]),
    kind=st.sampled_from(["read", "write"]),
    gap=_times,
    to_effect=_times,
    to_return=_times,
    pending=st.integers(min_value=0, max_value=7).map(lambda n: n == 0),
    effected=st.booleans(),
)
_plans = st.lists(st.lists(_steps, max_size=8), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(_plans)
def test_histories_of_an_atomic_register_are_linearizable(plans: list[list[Step]]) -> None:
    history = simulate(plans)
    result = check(history)
    assert result.ok, result.violations
    assert result.operations == len(history)


def _stale_candidates(history: list[Operation]) -> list[tuple[int, str]]:
    """(read index, stale value) pairs where the value is provably impossible for the read.

    The stale value was written (only) by W1, which returned before another completed write W2
    was called, and W2 returned before the read was called: every linearization orders
    W1 < W2 < read, so the read cannot see W1's value.
    """
    done = [op for op in history if op.kind == "write" and op.ret is not None]
    found = []
    for i, op in enumerate(history):
        if op.kind != "read" or op.ret is None:
            continue
        for w1 in done:
            if w1.key == op.key and any(
                w2.key == op.key
                and w1.ret is not None
                and w2.ret is not None
                and w1.ret < w2.call
                and w2.ret < op.call
                for w2 in done
            ):
                found.append((i, str(w1.value)))
    return found


@settings(max_examples=150, deadline=None)
@given(_plans, st.data())
def test_a_provably_stale_read_is_rejected(plans: list[list[Step]], data: st.DataObject) -> None:
    history = simulate(plans)
    candidates = _stale_candidates(history)
    if not candidates:
        # No natural triple: append one after everything else, by a fresh client.
        end = max([op.call for op in history] + [op.ret or 0.0 for op in history] + [0.0]) + 1
        history += [
            w("z.1", end, end + 1, key="a", client="z"),
            w("z.2", end + 2, end + 3, key="a", client="z"),
            r("z.1", end + 4, end + 5, key="a", client="z"),
        ]
        candidates = _stale_candidates(history)
    index, stale = data.draw(st.sampled_from(candidates))
    history[index] = replace(history[index], value=stale)
    result = check(history)
    assert not result.ok
    assert [v.key for v in result.violations] == [history[index].key]


# --- benchmark-sized history -----------------------------------------------------------------


def benchmark_history(
    seed: int, *, clients: int = 4, keys: int = 100, ops: int = 10_000
) -> list[Operation]:
    rng = random.Random(seed)
    plans = [
        [
            Step(
                key=f"urn:node:{rng.randrange(keys)}",
                kind="read" if rng.random() < 0.5 else "write",
                gap=rng.uniform(0, 0.2),
                to_effect=rng.uniform(0, 1),
                to_return=rng.uniform(0, 1),
            )
            for _ in range(ops // clients)
        ]
        for _ in range(clients)
    ]
    return simulate(plans)


def test_ten_thousand_operations_over_a_hundred_keys_check_in_linear_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The search's steps are counted, not timed: with the clock read at every step (mask 0)
    and a clock that stands still, each read after a key's first is one step. About one step
    per operation; a search that backtracked would take many times more."""
    history = benchmark_history(12)
    assert len(history) == 10_000
    monkeypatch.setattr(linearizability, "_CLOCK_MASK", 0)
    reads = itertools.count()

    def clock() -> float:
        next(reads)
        return 0.0

    result = check(history, timeout_s=1.0, clock=clock)
    assert result.ok
    assert result.keys_checked == 100
    steps = next(reads) - result.keys_checked  # one read per key sets its deadline
    assert steps <= 2 * len(history), steps


# --- agreement with brute force on small arbitrary histories --------------------------------


def brute_force_linearizable(history: list[Operation]) -> bool:
    """Try every order of every admissible subset of one key's operations (tiny inputs only)."""
    ops = [op for op in history if op.kind == "write" or (op.ok and op.ret is not None)]
    must = [op for op in ops if op.ret is not None and op.ok]
    optional = [op for op in ops if not (op.ret is not None and op.ok)]

    def ret(op: Operation) -> float:
        return op.ret if op.ret is not None and op.ok else float("inf")

    def legal(order: tuple[Operation, ...]) -> bool:
        value: str | None = None
        for pos, op in enumerate(order):
            if any(ret(later) < op.call for later in order[pos + 1 :]):
                return False
            if op.kind == "write":
                value = op.value
            elif op.value != value:
                return False
        return True

    for mask in range(1 << len(optional)):
        chosen = must + [op for b, op in enumerate(optional) if mask >> b & 1]
        if any(legal(order) for order in itertools.permutations(chosen)):
            return True
    return False


_small_ops = st.builds(
    Operation,
    client=st.sampled_from(["c1", "c2", "c3"]),
    key=st.just("k"),
    kind=st.sampled_from(["read", "write"]),
    value=st.sampled_from([None, "x", "y"]),
    call=_times,
    ret=st.one_of(st.none(), _times, _times),
    ok=st.integers(min_value=0, max_value=5).map(lambda n: n != 0),
).map(lambda op: op if op.ret is None else replace(op, ret=op.call + op.ret))


@settings(max_examples=200, deadline=None)
@given(st.lists(_small_ops, max_size=6))
def test_verdict_agrees_with_brute_force(history: list[Operation]) -> None:
    assert check(history).ok == brute_force_linearizable(history)

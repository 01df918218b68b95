"""The lease table's rules, by example and as a hypothesis state machine."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gliding.daemon import leases as L

LEASE_S = 10.0
OFFER_S = 4.0


def fresh() -> L.Leases:
    return L.Leases(lease_s=LEASE_S, offer_s=OFFER_S)


def test_first_claim_wins_and_a_repeated_claim_is_granted_again() -> None:
    t, fx = L.offer(fresh(), "k", 0.0)
    assert fx == [L.Offer("k", 1)]
    t, fx = L.claim(t, "k", 1, "w1", 1.0)
    assert fx == [L.Grant("k", 1, "w1", True)]
    t, fx = L.claim(t, "k", 1, "w2", 1.1)
    assert fx == [L.Grant("k", 1, "w2", False, "taken by w1")]
    t, fx = L.claim(t, "k", 1, "w1", 1.2)  # QoS 1 delivered the offer twice
    assert fx == [L.Grant("k", 1, "w1", True)]


def test_a_silent_holder_loses_the_key_to_the_next_epoch() -> None:
    t, _ = L.offer(fresh(), "k", 0.0)
    t, _ = L.claim(t, "k", 1, "w1", 0.0)
    t, fx = L.tick(t, LEASE_S - 1)
    assert fx == []  # within its lease
    t, _ = L.heartbeat(t, "w1", {"k": 1}, LEASE_S - 1)
    t, fx = L.tick(t, 2 * LEASE_S - 2)
    assert fx == []  # the heartbeat renewed it
    t, fx = L.tick(t, 2 * LEASE_S)
    assert fx == [L.Lapsed("k", "w1", LEASE_S + 1),
                  L.Revoke("k", 1, "w1", f"silent {LEASE_S + 1:.1f}s"), L.Offer("k", 2)]
    t, fx = L.claim(t, "k", 1, "w1", 2 * LEASE_S)  # the old holder comes back: stale
    assert fx[0].granted is False and "stale" in fx[0].reason
    t, fx = L.heartbeat(t, "w1", {"k": 1}, 2 * LEASE_S)  # its heartbeat does not adopt it
    assert t.keys["k"].holder is None
    assert fx == [L.Revoke("k", 1, "w1", "offer 1 is stale (now 2)")]  # it is told to stop
    t, fx = L.claim(t, "k", 2, "w2", 2 * LEASE_S + 1)
    assert fx == [L.Grant("k", 2, "w2", True)]


def test_an_unclaimed_offer_is_made_again_with_the_same_epoch() -> None:
    t, _ = L.offer(fresh(), "k", 0.0)
    t, fx = L.tick(t, OFFER_S + 0.5)
    assert fx == [L.Offer("k", 1)]
    t, fx = L.tick(t, OFFER_S + 1.0)
    assert fx == []  # not again before offer_s passed since the last offer


def test_done_keys_are_never_offered_or_granted() -> None:
    t, _ = L.offer(fresh(), "k", 0.0)
    t, _ = L.claim(t, "k", 1, "w1", 0.0)
    t, _ = L.done(t, "k")
    assert L.tick(t, 1000.0)[1] == []
    assert L.claim(t, "k", 1, "w1", 1.0)[1][0].granted is False
    assert L.offer(t, "k", 2.0)[1] == []  # a resumed runner re-issuing it changes nothing


def test_expected_work_is_offered_only_if_nobody_adopts_it() -> None:
    t, fx = L.expect(fresh(), "k", 0.0, wait_s=3.0)
    assert fx == [] and L.tick(t, 2.9)[1] == []
    assert L.tick(t, 3.1)[1] == [L.Offer("k", 1)]  # no heartbeat named it in time
    t, _ = L.heartbeat(t, "w1", {"k": 1}, 1.0)  # a worker of the killed process holds it
    assert t.keys["k"].holder == "w1" and L.tick(t, 3.1)[1] == []


def test_the_end_of_the_job_revokes_what_is_held() -> None:
    t, _ = L.offer(fresh(), "a", 0.0)
    t, _ = L.offer(t, "b", 0.0)
    t, _ = L.claim(t, "a", 1, "w1", 0.0)
    t, fx = L.revoke_all(t, "the job ended")
    assert fx == [L.Revoke("a", 1, "w1", "the job ended")]
    assert t.open_keys() == [] and L.tick(t, 100.0)[1] == []


def test_a_heartbeat_adopts_a_key_nobody_holds() -> None:
    t, _ = L.offer(fresh(), "k", 0.0)
    t, _ = L.heartbeat(t, "w9", {"k": 1, "unknown": 1}, 1.0)
    assert t.keys["k"].holder == "w9" and "unknown" not in t.keys
    assert L.claim(t, "k", 1, "w2", 2.0)[1][0].granted is False


WORKERS = ("w1", "w2", "w3")


class LeaseMachine(RuleBasedStateMachine):
    """Random offers, claims, heartbeats, deaths and time: the grants stay exclusive."""

    def __init__(self) -> None:
        super().__init__()
        self.t = fresh()
        self.now = 0.0
        self.alive = set(WORKERS)
        self.granted: dict[tuple[str, int], str] = {}  # (key, epoch) -> worker
        self.done: set[str] = set()
        self.n = 0

    def _apply(self, effects: list[L.Effect]) -> None:
        for e in effects:
            if isinstance(e, L.Grant) and e.granted:
                owner = self.granted.setdefault((e.key, e.epoch), e.worker)
                assert owner == e.worker, "two workers granted one epoch of a key"
            if isinstance(e, L.Offer):
                assert e.key not in self.done, "a done key was offered"
            if isinstance(e, L.Revoke):  # never the holder of the key's current epoch
                lease = self.t.keys[e.key]
                assert lease.done or (e.worker, e.epoch) != (lease.holder, lease.epoch)

    @rule()
    def new_work(self) -> None:
        self.n += 1
        self.t, fx = L.offer(self.t, f"k{self.n}", self.now)
        self._apply(fx)

    @precondition(lambda self: self.t.keys)
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def claim(self, data: st.DataObject, worker: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.t.keys)))
        epoch = data.draw(st.sampled_from([self.t.keys[key].epoch,
                                           max(1, self.t.keys[key].epoch - 1)]))
        self.t, fx = L.claim(self.t, key, epoch, worker, self.now)
        self._apply(fx)

    @rule(worker=st.sampled_from(WORKERS))
    def beat(self, worker: str) -> None:
        if worker not in self.alive:
            return
        held = {k: lease.epoch for k, lease in self.t.keys.items() if lease.holder == worker}
        self.t, fx = L.heartbeat(self.t, worker, held, self.now)
        self._apply(fx)

    @rule(worker=st.sampled_from(WORKERS))
    def die(self, worker: str) -> None:
        self.alive.discard(worker)

    @precondition(lambda self: self.t.open_keys())
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.t.open_keys()))
        self.t, fx = L.done(self.t, key)
        self.done.add(key)
        self._apply(fx)

    @rule(dt=st.floats(0.1, 3 * LEASE_S))
    def wait(self, dt: float) -> None:
        before = {k: (lease.holder, lease.heard) for k, lease in self.t.keys.items()}
        self.now += dt
        self.t, fx = L.tick(self.t, self.now)
        self._apply(fx)
        for e in fx:
            if isinstance(e, L.Lapsed):  # only a holder silent past its lease loses a key
                holder, heard = before[e.key]
                assert holder == e.worker and self.now - heard > LEASE_S

    @invariant()
    def no_done_key_is_held_anew(self) -> None:
        for key in self.done:
            assert self.t.keys[key].done

    @invariant()
    def a_silent_key_is_never_stuck(self) -> None:
        # after any tick, nothing open waits longer than its lease (or offer interval) + the
        # last step's wait: tick re-offers it
        for lease in self.t.keys.values():
            if not lease.done:
                assert lease.heard <= self.now


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)

"""Who works on what: the pure table of a job's work handed to ``gliding worker`` processes.

Every assignment of a job that runs on workers is one *key* here. The table is a value
(``Leases``, frozen) and every change is a pure function ``(leases, event, now) -> (leases,
effects)``; the dispatcher (``daemon/dispatch.py``) carries the effects out on the bus. It never
reads a clock: ``now`` is given.

    offer(key)            new work: Offer it to the worker pool (epoch 1)
    expect(key, wait_s)   work that may be held already (a resumed job): offer it only if no
                          heartbeat adopts it within ``wait_s``
    claim(key, epoch, w)  a worker that received the offer asks for it
    heartbeat(w, keys)    worker ``w`` is alive and still holds ``keys``
    done(key)             the key's answer arrived: nothing more is offered or granted
    tick                  time passed: re-offer what nobody took or whose holder went silent
    revoke_all            the job ends: every holder is told to stop

The rules:

* A key is granted to one worker per epoch: the first claim of the current epoch wins; the same
  worker claiming again gets the grant again (QoS 1 may deliver an offer or a claim twice, so a
  claim is idempotent); every other claim is refused.
* The holder must be heard from (a claim or a heartbeat naming the key) at least every
  ``lease_s``; otherwise the key is offered again with the next epoch and the old holder is
  sent a Revoke (it stops that session); its later claims and heartbeats no longer count (its
  epoch is stale), and a heartbeat naming a stale epoch is answered with another Revoke. Should
  a slow holder still answer, the supervisor takes only the first answer (answers are
  correlated, never taken twice).
* An offer nobody claimed within ``offer_s`` is made again with the same epoch (no worker was
  subscribed, or a worker declined it because it was full).
* A heartbeat from a worker that names a key it was never granted adopts it when the key is
  offered and not granted (a restarted dispatcher learns who was already working).
* A done key is never offered or granted again.
* A declined offer (the worker was full) is not offered again at once: the next tick after
  ``offer_s`` does it, so a pool of full workers is not flooded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal


@dataclass(frozen=True)
class Lease:
    key: str
    epoch: int = 1
    holder: str | None = None  # the worker granted the key in this epoch
    heard: float = 0.0  # when the holder was last heard from (or the offer was made)
    done: bool = False


@dataclass(frozen=True)
class Offer:
    """Publish the key's work to the pool (``epoch`` says which hand-out this is)."""

    key: str
    epoch: int
    kind: Literal["offer"] = "offer"


@dataclass(frozen=True)
class Grant:
    """Answer ``worker``'s claim of ``key``: ``granted`` or refused with ``reason``."""

    key: str
    epoch: int
    worker: str
    granted: bool
    reason: str = ""
    kind: Literal["grant"] = "grant"


@dataclass(frozen=True)
class Lapsed:
    """A holder went silent: for the log and the job's events (an Offer follows)."""

    key: str
    worker: str
    silent_s: float
    kind: Literal["lapsed"] = "lapsed"


@dataclass(frozen=True)
class Revoke:
    """Tell ``worker`` to stop its session of ``key`` (granted in ``epoch``)."""

    key: str
    epoch: int
    worker: str
    reason: str
    kind: Literal["revoke"] = "revoke"


Effect = Offer | Grant | Lapsed | Revoke


@dataclass(frozen=True)
class Leases:
    lease_s: float
    offer_s: float
    keys: dict[str, Lease] = field(default_factory=dict)

    def open_keys(self) -> list[str]:
        """The keys not done yet."""
        return [k for k, lease in self.keys.items() if not lease.done]


def _with(leases: Leases, lease: Lease) -> Leases:
    return replace(leases, keys={**leases.keys, lease.key: lease})


def offer(leases: Leases, key: str, now: float) -> tuple[Leases, list[Effect]]:
    """New work under ``key``; offering a key already known changes nothing (a resumed runner
    re-issues what it waits for)."""
    if key in leases.keys:
        return leases, []
    return _with(leases, Lease(key, heard=now)), [Offer(key, 1)]


def expect(leases: Leases, key: str, now: float,
           wait_s: float) -> tuple[Leases, list[Effect]]:
    """Work a worker may hold already (a resumed job's): known, offered only by ``tick`` if no
    heartbeat adopted it within ``wait_s``."""
    if key in leases.keys:
        return leases, []
    return _with(leases, Lease(key, heard=now + wait_s - leases.offer_s)), []


def claim(leases: Leases, key: str, epoch: int, worker: str,
          now: float) -> tuple[Leases, list[Effect]]:
    """``worker`` claims ``key`` as offered in ``epoch``."""
    lease = leases.keys.get(key)
    if lease is None:
        return leases, [Grant(key, epoch, worker, False, "no such work")]
    if lease.done:
        return leases, [Grant(key, epoch, worker, False, "done already")]
    if epoch != lease.epoch:
        return leases, [Grant(key, epoch, worker, False,
                              f"offer {epoch} is stale (now {lease.epoch})")]
    if lease.holder is not None and lease.holder != worker:
        return leases, [Grant(key, epoch, worker, False, f"taken by {lease.holder}")]
    return (_with(leases, replace(lease, holder=worker, heard=now)),
            [Grant(key, epoch, worker, True)])


def heartbeat(leases: Leases, worker: str, held: dict[str, int],
              now: float) -> tuple[Leases, list[Effect]]:
    """``worker`` holds ``held`` (key -> epoch): renew them, adopt ones nobody holds."""
    out = leases
    effects: list[Effect] = []
    for key, epoch in held.items():
        lease = out.keys.get(key)
        if lease is None:
            continue
        if lease.done or epoch != lease.epoch:
            effects.append(Revoke(key, epoch, worker, "done" if lease.done else
                                  f"offer {epoch} is stale (now {lease.epoch})"))
        elif lease.holder == worker or lease.holder is None:
            out = _with(out, replace(lease, holder=worker, heard=now))
        else:
            effects.append(Revoke(key, epoch, worker, f"taken by {lease.holder}"))
    return out, effects


def done(leases: Leases, key: str) -> tuple[Leases, list[Effect]]:
    """The key's answer arrived."""
    lease = leases.keys.get(key)
    if lease is None or lease.done:
        return leases, []
    return _with(leases, replace(lease, done=True)), []


def tick(leases: Leases, now: float) -> tuple[Leases, list[Effect]]:
    """Re-offer what lapsed: a silent holder after ``lease_s`` (next epoch), an unclaimed offer
    after ``offer_s`` (same epoch)."""
    out = leases
    effects: list[Effect] = []
    for lease in leases.keys.values():
        if lease.done:
            continue
        silent = now - lease.heard
        if lease.holder is not None and silent > leases.lease_s:
            nxt = replace(lease, epoch=lease.epoch + 1, holder=None, heard=now)
            effects += [Lapsed(lease.key, lease.holder, silent),
                        Revoke(lease.key, lease.epoch, lease.holder, f"silent {silent:.1f}s"),
                        Offer(lease.key, nxt.epoch)]
            out = _with(out, nxt)
        elif lease.holder is None and silent > leases.offer_s:
            out = _with(out, replace(lease, heard=now))
            effects.append(Offer(lease.key, lease.epoch))
    return out, effects


def revoke_all(leases: Leases, reason: str) -> tuple[Leases, list[Effect]]:
    """The job ends: every key is done, and each holder is told to stop."""
    effects: list[Effect] = [Revoke(lease.key, lease.epoch, lease.holder, reason)
                             for lease in leases.keys.values()
                             if lease.holder is not None and not lease.done]
    keys = {k: replace(lease, done=True) for k, lease in leases.keys.items()}
    return replace(leases, keys=keys), effects

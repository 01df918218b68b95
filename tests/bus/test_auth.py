"""Signed envelopes (``gliding/bus/auth.py``): who can sign, who can check, what is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gliding.bus import auth, topics
from gliding.bus.auth import (
    ROOT,
    Forged,
    Keyring,
    Opener,
    Sealer,
    read_key_file,
    root_keyring,
    worker_key,
    write_key_file,
)
from gliding.errors import BusError

ROOT_KEY = bytes(range(32))
MSG = '{"type":"job_event","job":"j1","event":"x","data":{}}'


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sealer(ring: Keyring, sender: str, clock: Clock) -> Sealer:
    return Sealer(ring, sender, recipient=topics.recipient, clock=clock)


def test_the_root_checks_a_worker_and_a_worker_reads_only_what_is_for_it() -> None:
    clock = Clock()
    root, box1 = Keyring(ROOT_KEY), Keyring(worker_key(ROOT_KEY, "box1"), "box1")
    box2 = Keyring(worker_key(ROOT_KEY, "box2"), "box2")
    from_box1 = sealer(box1, "worker:box1", clock).seal("claims/j1", MSG)
    opened = Opener(root, clock=clock).open("claims/j1", from_box1, 1)
    assert (opened.sender, opened.msg, opened.verified) == ("worker:box1", MSG, True)

    grant = sealer(root, ROOT, clock).seal("worker/box1.77-ab/grants", MSG)
    assert Opener(box1, clock=clock).open("worker/box1.77-ab/grants", grant, 1).verified
    with pytest.raises(Forged, match="for worker box1"):  # box2 cannot read box1's grants
        Opener(box2, clock=clock).open("worker/box1.77-ab/grants", grant, 1)
    offer = sealer(root, ROOT, clock).seal("work/DA", MSG)  # to the pool: nobody's key
    assert not Opener(box2, clock=clock).open("work/DA", offer, 1).verified


def test_a_worker_cannot_sign_as_another_or_as_the_root() -> None:
    box2 = Keyring(worker_key(ROOT_KEY, "box2"), "box2")
    with pytest.raises(BusError, match="for 'box2', not 'box1'"):
        box2.as_worker("box1")
    assert box2.key_of(ROOT) is None and box2.key_of("worker:box1") is None
    clock = Clock()
    forged = sealer(box2, ROOT, clock)
    with pytest.raises(BusError, match="no key to sign as root"):
        forged.seal("job/j1/result/AA", MSG)


def test_tampering_a_replay_and_an_old_message_are_refused() -> None:
    clock = Clock()
    root = Keyring(ROOT_KEY)
    seal = sealer(Keyring(worker_key(ROOT_KEY, "box1"), "box1"), "worker:box1", clock)
    opener = Opener(root, clock=clock, window_s=300)
    first = seal.seal("job/j1/events", MSG)
    head, _, body = first.partition(b"\n")
    with pytest.raises(Forged, match="bad signature"):
        opener.open("job/j1/events", head + b"\n" + body.replace(b'"x"', b'"y"'), 1)
    with pytest.raises(Forged, match="bad signature"):  # the topic is signed too
        opener.open("job/j2/events", first, 1)
    assert opener.open("job/j1/events", first, 1).verified
    with pytest.raises(Forged, match="again"):  # the same message again: a replay
        opener.open("job/j1/events", first, 1)
    assert opener.open("job/j1/events", first, 2).verified  # a second subscription's copy
    clock.t += 301
    late = Opener(root, clock=clock)
    with pytest.raises(Forged, match="window"):  # captured long ago, played to a new one
        late.open("job/j1/events", first, 1)


def test_a_worker_key_cannot_pass_as_the_root() -> None:
    """A worker signs "from root, to itself" with its own key (that is the key of the root's
    messages to it): refused on every topic but its own, by the root and by workers."""
    clock = Clock()
    box1 = Keyring(worker_key(ROOT_KEY, "box1"), "box1")
    as_root = Sealer(box1, ROOT, recipient=lambda topic: "box1", clock=clock)
    root = Opener(Keyring(ROOT_KEY), clock=clock, recipient=topics.recipient)
    worker = Opener(box1, clock=clock, recipient=topics.recipient)
    for topic in ("job/j1/result/AA", "job/j1/agent/DA", "work/DA", "worker/box2.1-a/grants",
                  "coherence/j1/directory", "archive/j1/request"):
        for opener in (root, worker):
            with pytest.raises(Forged, match="on a topic that is not its"):
                opener.open(topic, as_root.seal(topic, MSG), 1)
    plain = Sealer(Keyring(ROOT_KEY), ROOT, recipient=lambda topic: None, clock=clock)
    with pytest.raises(Forged, match="without its recipient"):  # a grant under the root key
        worker.open("worker/box1.1-a/grants", plain.seal("worker/box1.1-a/grants", MSG), 1)
    # on its own topics it is the root's word to it, as the root seals it
    assert worker.open("worker/box1.1-a/grants", as_root.seal("worker/box1.1-a/grants", MSG),
                       2).verified


@pytest.mark.parametrize("t", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_low_a_time_that_is_no_number_is_refused(t: str) -> None:
    clock = Clock()
    box1 = Keyring(worker_key(ROOT_KEY, "box1"), "box1")
    good = sealer(box1, "worker:box1", clock).seal("job/j1/events", MSG)
    head, _, body = good.partition(b"\n")
    env = json.loads(head)
    forged = (head.replace(f'"t":{env["t"]!r}'.encode(), f'"t":{t}'.encode())
              + b"\n" + body)
    assert forged != good
    with pytest.raises(Forged, match="not a signed Gliding envelope"):
        Opener(Keyring(ROOT_KEY), clock=clock).open("job/j1/events", forged, 1)


def test_one_key_holder_cannot_push_anothers_numbers_out() -> None:
    clock = Clock()
    root = Keyring(ROOT_KEY)
    opener = Opener(root, clock=clock)
    honest = sealer(Keyring(worker_key(ROOT_KEY, "box1"), "box1"), "worker:box1", clock)
    captured = honest.seal("job/j1/events", MSG)
    assert opener.open("job/j1/events", captured, 1).verified
    flooder = Keyring(worker_key(ROOT_KEY, "box2"), "box2")
    for _ in range(auth._TRACKED_PER_OWNER + 100):  # a fresh boot for every message
        opener.open("job/j1/events", sealer(flooder, "worker:box2", clock).seal(
            "job/j1/events", MSG), 1)
    with pytest.raises(Forged, match="again"):
        opener.open("job/j1/events", captured, 1)


def test_a_message_stamped_before_its_subscription_began_is_a_replay() -> None:
    clock = Clock()
    seal = sealer(Keyring(worker_key(ROOT_KEY, "box1"), "box1"), "worker:box1", clock)
    captured = seal.seal("job/j1/events", MSG)
    clock.t += auth.SKEW_S + 1  # a receiver restarted, or subscribed anew, since
    restarted = Opener(Keyring(ROOT_KEY), clock=clock)
    with pytest.raises(Forged, match="before its subscription began"):
        restarted.open("job/j1/events", captured, 1, since=clock.t)
    fresh = seal.seal("job/j1/events", MSG)
    assert restarted.open("job/j1/events", fresh, 1, since=clock.t).verified
    slow = sealer(Keyring(worker_key(ROOT_KEY, "box1"), "box1"), "worker:box1",
                  Clock(clock.t - auth.SKEW_S + 1))  # a clock a little behind: still taken
    assert restarted.open("job/j1/events", slow.seal("job/j1/events", MSG), 1,
                          since=clock.t).verified


@pytest.mark.parametrize("payload", [b"", b"junk", MSG.encode(),
                                     json.dumps({"gliding": 1}).encode() + b"\n" + b"{}"])
def test_what_is_not_an_envelope_is_refused(payload: bytes) -> None:
    with pytest.raises(Forged, match="not a signed Gliding envelope"):
        Opener(Keyring(ROOT_KEY)).open("job/j1/events", payload, 1)


def test_key_files_are_private_and_never_overwritten(tmp_path: Path) -> None:
    root = root_keyring(tmp_path / "d" / "bus.key")
    assert root.is_root and root_keyring(tmp_path / "d" / "bus.key") == root  # made once
    assert (tmp_path / "d" / "bus.key").stat().st_mode & 0o777 == 0o600
    path = write_key_file(tmp_path / "box1.key", worker_key(root.key, "box1"), "box1")
    assert read_key_file(path) == Keyring(worker_key(root.key, "box1"), "box1")
    with pytest.raises(BusError, match="exists already"):
        write_key_file(path, root.key)
    os.chmod(path, 0o644)
    with pytest.raises(BusError, match="readable by others"):
        read_key_file(path)
    (tmp_path / "bad.key").write_text("{}")
    os.chmod(tmp_path / "bad.key", 0o600)
    with pytest.raises(BusError, match="not a bus key file"):
        read_key_file(tmp_path / "bad.key")
    with pytest.raises(BusError, match="no bus key"):
        read_key_file(tmp_path / "missing.key")
    with pytest.raises(BusError, match="bad worker name"):
        worker_key(root.key, "a.b")


def test_topics_name_the_worker_they_address() -> None:
    assert topics.recipient("worker/box1.77-ab/grants") == "box1"
    assert topics.recipient("worker/box1.77-ab/archive") == "box1"
    assert topics.recipient("coherence/j1/cache/box1.77-ab.c0ffee") == "box1"
    assert topics.recipient("coherence/j1/cache/@ingest.c0ffee") is None  # the job's own
    assert topics.recipient("work/DA") is None and topics.recipient("job/j1/events") is None

"""Who may say what on a network bus: keys, signed envelopes, replay refusal.

The root of trust never crosses the bus. A **root key** (32 random bytes; ``<data_dir>/bus.key``
or ``bus.key_file``, a 0600 file) is held by the processes that run jobs: the daemon and
``gliding run``. Each ``gliding worker`` holds a **worker key** made from it for one enrolled
name (``gliding worker init NAME``, copied to the worker's host by the operator)::

    worker key of E = HMAC-SHA256(root, "gliding worker\\0" + E)

so the root holder can check any worker's messages, and a worker can sign only as itself.

Every message on an MQTT bus travels in an envelope (``Sealer.seal``/``Opener.open``): one line
of JSON, then the message's own JSON as it is::

    {"gliding": 1, "from": "root" | "worker:E", "boot": B, "seq": N, "t": unix time,
     "to": E or "", "mac": hex}
    <the message's JSON>

``mac`` is HMAC-SHA256 over the topic, every other field and the message: a worker's
messages under its own key; the root's under the worker key of ``to`` when the topic names one
worker (its grants, archive replies, coherence fills: ``recipient``), else under the root key.
A worker can thus read what the root sends it and nothing the root sends others; what it cannot
check (the root's work offers, sent to the whole pool) reaches only subscriptions that take
unverified messages, and a worker runs an offer only once a grant it *can* check names the
offer's digest.

Replays: ``boot`` is random per bus connection and ``seq`` counts its messages, signed at the
moment they are written to the socket, so each receiver sees one sender's messages on one topic
with growing numbers; a number not above the last one seen (per boot, topic and subscription)
is a replay, or a broker's second copy, and is dropped. A message whose time is more than
``window_s`` from the receiver's clock is refused too, and so is one stamped more than
``SKEW_S`` before the subscription that receives it began (a receiver restarted, or a new
subscription, hears nothing captured before it): clocks must agree within ``SKEW_S``. The
numbers are kept per sender's owner (at most ``_TRACKED_PER_OWNER`` boots, topics and
subscriptions each, least recently used dropped first), so no key holder can push another's
record out.

The root's message to a worker (``to`` set) is accepted only on a topic that addresses that
worker (``recipient``), and by a worker only if it is that one: the key of ``to`` is the
worker's own, so on any other topic such a "root" message could come from the worker itself.

``Opener`` says who sent a message (``Sealed.sender``); what a sender may say on which topic is
the receiver's policy (the job's: ``daemon/dispatch.py``, ``JobPolicy``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gliding.errors import BusError

ROOT = "root"
WORKER_PREFIX = "worker:"
ENVELOPE_VERSION = 1
KEY_BYTES = 32
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
MAX_NAME = 64
DEFAULT_WINDOW_S = 300.0  # a message older (or newer) than this by the receiver's clock: refused
SKEW_S = 10.0  # a message stamped this long before its subscription began: refused
_TRACKED_PER_OWNER = 10_000  # (boot, topic, subscription) numbers kept per sender's owner


class Forged(BusError):
    """A message on the bus that its receiver must not believe (bad or missing signature, a
    replay, a time outside the window, a sender the receiver's policy refuses)."""

    code = "bus.forged"

    def __init__(self, message: str, *, hint: str | None = None, kind: str = "forged") -> None:
        super().__init__(message, hint=hint)
        self.kind = kind  # unsigned, signature, recipient, unknown, window, replay, policy


def check_name(name: str) -> str:
    """Return ``name`` if it can be an enrolled worker name (letters, digits, ``_``, ``-``).

    Raises:
        BusError: it cannot.
    """
    if not name or len(name) > MAX_NAME or not set(name) <= NAME_CHARS:
        raise BusError(f"bad worker name {name!r}: 1 to {MAX_NAME} letters, digits, _ or -",
                       hint="e.g. gliding worker init gpu-box-1")
    return name


def owner(instance: str) -> str:
    """The enrolled name a worker process, or a cache of one, acts for: the part of its name
    before the first dot (``box1.8f3a`` and ``box1.8f3a.77c2`` act for ``box1``)."""
    return instance.split(".", 1)[0]


def worker_key(root: bytes, name: str) -> bytes:
    return hmac.new(root, b"gliding worker\0" + check_name(name).encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class Keyring:
    """The key this process holds: the root (``name`` None) or one worker's."""

    key: bytes
    name: str | None = None  # the enrolled worker name, for a worker key

    @property
    def is_root(self) -> bool:
        return self.name is None

    def key_of(self, sender_or_recipient: str) -> bytes | None:
        """The key for messages of ``worker:E`` (or to E), or of the root; None when this
        process does not hold it."""
        if sender_or_recipient == ROOT:
            return self.key if self.is_root else None
        name = sender_or_recipient.removeprefix(WORKER_PREFIX)
        if self.is_root:
            try:
                return worker_key(self.key, name)
            except BusError:
                return None
        return self.key if name == self.name else None

    def as_worker(self, name: str) -> Keyring:
        """This ring as worker ``name`` signs (a root ring derives that worker's key).

        Raises:
            BusError: a worker key of another name.
        """
        check_name(name)
        if self.is_root:
            return Keyring(worker_key(self.key, name), name)
        if name != self.name:
            raise BusError(f"this worker key is for {self.name!r}, not {name!r}",
                           hint=f"start the worker as {self.name}, or enrol {name}")
        return self


# ---- key files ---------------------------------------------------------------------------------

def write_key_file(path: Path, key: bytes, name: str | None = None) -> Path:
    """Write a key file (0600, created exclusively: an existing file is never overwritten).

    Raises:
        BusError: it exists, or cannot be written.
    """
    record: dict[str, Any] = {"gliding_bus_key": 1, "kind": "root" if name is None else "worker",
                              "key": key.hex()}
    if name is not None:
        record["name"] = check_name(name)
    # written whole under a temporary name, then linked into place: a reader (another process
    # making the same key at the same moment) never sees a half-written file
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out)
            out.write("\n")
        os.link(temp, path)
    except FileExistsError:
        raise BusError(f"{path} exists already", hint="remove it first, or use another path") \
            from None
    except OSError as exc:
        raise BusError(f"cannot write the bus key {path}: {exc.strerror or exc}") from exc
    finally:
        temp.unlink(missing_ok=True)
    return path


def read_key_file(path: Path) -> Keyring:
    """The key in ``path``.

    Raises:
        BusError: no such file, not a key file, or readable by others than its owner.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BusError(f"no bus key at {path}",
                       hint="a worker needs the key `gliding worker init NAME` wrote on the "
                            "daemon's host (bus.key_file)") from None
    except OSError as exc:
        raise BusError(f"cannot read the bus key {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > 4096:
            raise BusError(f"{path} is not a bus key file")
        if info.st_mode & 0o077:
            raise BusError(f"the bus key {path} is readable by others (mode "
                           f"{info.st_mode & 0o777:o})", hint=f"chmod 600 {path}")
        raw = source.read(4096)
    try:
        record = json.loads(raw)
        key = bytes.fromhex(record["key"])
        kind = record["kind"]
        name = check_name(record["name"]) if kind == "worker" else None
        if record.get("gliding_bus_key") != 1 or kind not in ("root", "worker") or (
                len(key) != KEY_BYTES):
            raise ValueError
    except (ValueError, KeyError, TypeError, BusError):
        raise BusError(f"{path} is not a bus key file",
                       hint="make one with `gliding worker init NAME`") from None
    return Keyring(key, name)


def root_keyring(path: Path) -> Keyring:
    """The root key at ``path``, made (0600) when there is none yet.

    Raises:
        BusError: it exists but is unusable, or cannot be made.
    """
    try:
        return read_key_file(path)
    except BusError:
        if path.exists() or path.is_symlink():
            raise
    try:
        write_key_file(path, secrets.token_bytes(KEY_BYTES))
    except BusError:
        if not path.exists():
            raise  # else another process made it at the same moment: read theirs
    return read_key_file(path)


# ---- envelopes ---------------------------------------------------------------------------------

def _mac(key: bytes, topic: str, head: tuple[str, str, int, float, str], msg: bytes) -> str:
    sender, boot, seq, t, to = head
    mac = hmac.new(key, f"{topic}\n{sender}\n{boot}\n{seq}\n{t!r}\n{to}\n".encode(),
                   hashlib.sha256)
    mac.update(msg)
    return mac.hexdigest()


class Sealer:
    """Signs what one bus connection sends: one boot id, numbers in sending order."""

    def __init__(self, keyring: Keyring, sender: str, *,
                 recipient: Callable[[str], str | None],
                 clock: Callable[[], float] = time.time) -> None:
        self.keyring = keyring
        self.sender = sender
        self.boot = secrets.token_hex(8)
        self._seq = itertools.count(1)
        self._recipient = recipient
        self._clock = clock

    def seal(self, topic: str, msg: str) -> bytes:
        """The envelope of ``msg`` (a message's JSON) for ``topic``; numbered now."""
        to = ""
        if self.sender == ROOT:
            to = self._recipient(topic) or ""
        key = self.keyring.key_of(WORKER_PREFIX + to if to else self.sender)
        if key is None:
            raise BusError(f"this process holds no key to sign as {self.sender}")
        head = (self.sender, self.boot, next(self._seq), round(self._clock(), 3), to)
        body = msg.encode()
        # the fields need no escaping (names, hex, numbers): formatted, not json.dumps'd
        return (f'{{"gliding":{ENVELOPE_VERSION},"from":"{head[0]}","boot":"{head[1]}",'
                f'"seq":{head[2]},"t":{head[3]!r},"to":"{to}",'
                f'"mac":"{_mac(key, topic, head, body)}"}}\n').encode() + body


@dataclass(frozen=True)
class Sealed:
    """An envelope that was opened: who sent it and the message's JSON (``verified`` False:
    nobody here could check it, as a worker cannot check the root's offers to the pool)."""

    sender: str
    msg: str
    verified: bool


class Opener:
    """Checks envelopes on one bus connection: signature, recipient, time window, numbering."""

    def __init__(self, keyring: Keyring, *, window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.time,
                 recipient: Callable[[str], str | None] | None = None) -> None:
        self.keyring = keyring
        self.window_s = window_s
        self._clock = clock
        if recipient is None:  # the topics' own rule unless told otherwise (a test's)
            from gliding.bus import topics  # topics names workers with this module's rules

            recipient = topics.recipient
        self._recipient = recipient  # the worker a topic addresses
        # per sender's owner: (boot, sender, topic, subscription) -> last number, LRU order
        self._last: dict[str, dict[tuple[str, str, str, int], int]] = {}

    def open(self, topic: str, payload: bytes | str, ident: int,
             since: float | None = None) -> Sealed:
        """The sender and message of ``payload``, received on ``topic`` for the subscription
        ``ident`` (made at time ``since``, when given).

        Raises:
            Forged: not an envelope, a bad signature, a root message naming a recipient this
                receiver is not (or on a topic not addressed to it), a time outside the
                window or before the subscription began, or a number this subscription has
                seen (a replay or a second copy).
        """
        sender, boot, seq, t, to, mac, body, msg = _parse(payload)
        if sender != ROOT and not sender.startswith(WORKER_PREFIX):
            raise Forged(f"unknown sender {sender[:80]!r}", kind="unknown")
        if sender != ROOT and to:
            raise Forged("a worker's message names a recipient", kind="unknown")
        if to:
            self._check_recipient(topic, to)
        elif sender == ROOT and self._recipient(topic):
            raise Forged("a root message without its recipient on a worker's topic",
                         kind="recipient")
        key = self.keyring.key_of(WORKER_PREFIX + to if to else sender)
        verified = key is not None
        if verified:
            assert key is not None
            good = _mac(key, topic, (sender, boot, seq, t, to), body)
            if not hmac.compare_digest(good, mac):
                raise Forged(f"bad signature on a message from {sender[:80]}", kind="signature")
        now = self._clock()
        if abs(now - t) > self.window_s:
            raise Forged(f"a message {now - t:+.0f}s from now (window {self.window_s:g}s)",
                         hint="a replay, or clocks that disagree: check NTP", kind="window")
        if since is not None and t < since - SKEW_S:
            raise Forged(f"a message stamped {since - t:.0f}s before its subscription began "
                         "(a replay)", hint="or clocks that disagree: check NTP", kind="replay")
        if verified:
            self._number(sender, (boot, sender, topic, ident), seq)
        return Sealed(sender, msg, verified)

    def _check_recipient(self, topic: str, to: str) -> None:
        """A root message naming ``to`` is for worker ``to`` alone, on its own topics (its
        grants, archive replies, caches' fills): a worker can sign such a message with its own
        key, so on any other topic it would pass as the root.

        Raises:
            Forged: the topic addresses another (or no) worker, or this worker is not ``to``.
        """
        if self._recipient(topic) != to:
            raise Forged(f"a message for worker {to[:80]} on a topic that is not its",
                         kind="recipient")
        if not self.keyring.is_root and to != self.keyring.name:
            raise Forged(f"a message for worker {to[:80]}", kind="other")  # not ours to read

    def _number(self, sender: str, slot: tuple[str, str, str, int], seq: int) -> None:
        """Record ``seq`` for ``slot``.

        Raises:
            Forged: a number not above the last one of the slot (a replay or a copy).
        """
        slots = self._last.setdefault(owner(sender.removeprefix(WORKER_PREFIX)), {})
        last = slots.pop(slot, 0)  # popped and put back: the most recently used goes last
        if seq <= last:
            slots[slot] = last
            raise Forged(f"message {seq} of {sender[:80]} again (a replay or a copy)",
                         kind="replay")
        if len(slots) >= _TRACKED_PER_OWNER:
            slots.pop(next(iter(slots)))  # this owner's least recently used
        slots[slot] = seq


def _parse(payload: bytes | str) -> tuple[str, str, int, float, str, str, bytes, str]:
    """The fields of an envelope: sender, boot, seq, t, to, mac, the message's bytes and text.

    Raises:
        Forged: not a signed Gliding envelope (a missing field, a field of the wrong type,
            a time that is not a finite number).
    """
    try:
        raw = payload.encode() if isinstance(payload, str) else payload
        head_bytes, sep, body = raw.partition(b"\n")
        if not sep or len(head_bytes) > 2048:
            raise ValueError
        env = _HEAD.decode(head_bytes.decode())
        msg = body.decode()  # checks it is text; the MAC is over the bytes
        sender, boot, seq, t, to, mac = (
            env["from"], env["boot"], env["seq"], env["t"], env["to"], env["mac"])
        if env.get("gliding") != ENVELOPE_VERSION or not all(
                isinstance(x, str) for x in (sender, boot, to, msg, mac)) or not isinstance(
                seq, int) or isinstance(seq, bool) or not isinstance(t, int | float) or (
                not math.isfinite(t)):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Forged("not a signed Gliding envelope", kind="unsigned",
                     hint="every sender on this broker needs the bus key") from None
    return sender, boot, seq, float(t), to, mac, body, msg


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no time")


_HEAD = json.JSONDecoder(parse_constant=_no_constant)  # NaN and Infinity are no JSON numbers


@dataclass
class BusAuth:
    """What a bus connection signs with and checks with, and the receiver's ``policy``: given
    the topic, a verified sender other than the root and the message, the reason to refuse
    it, or None to take it (None: take whatever verifies)."""

    sealer: Sealer
    opener: Opener
    policy: Callable[[str, str, Any], str | None] | None = None


def digest(message_json: str) -> str:
    """What a grant names of the offer it answers: the SHA-256 of its JSON."""
    return hashlib.sha256(message_json.encode()).hexdigest()


def root_auth(path: Path) -> BusAuth:
    """Signing and checking as the root, with the root key at ``path`` (made when missing):
    what a job's process uses, and a benchmark's processes sharing one key.

    Raises:
        BusError: the key file is unusable.
    """
    return auth_for(root_keyring(path), ROOT)


def auth_for(ring: Keyring, sender: str) -> BusAuth:
    """Signing as ``sender`` (the root, or ``worker:E``) and checking with ``ring``."""
    from gliding.bus import topics  # topics names workers with this module's rules

    return BusAuth(Sealer(ring, sender, recipient=topics.recipient),
                   Opener(ring, recipient=topics.recipient))

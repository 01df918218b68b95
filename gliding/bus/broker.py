"""A mosquitto configuration for Gliding: credentials and per-topic rights, the broker's own wall
in front of the signed messages of ``bus/auth.py``.

    gliding broker init DIR --worker box1 --worker box2 [--port 1883] [--bind 127.0.0.1]
                        [--tls [--tls-host NAME ...]]

writes into DIR (0700; every file 0600):

    mosquitto.conf      a listener, no anonymous clients, the password and ACL files, the
                        largest packet (``bus.max_message_bytes`` and an envelope's room)
    passwd              mosquitto's password file (hashed by ``mosquitto_passwd``)
    acl                 what each user may read and write
    gliding.password    the password of user ``gliding``: the daemon and ``gliding run``
    <worker>.password   each worker's, to copy to its host with its bus key

and with ``--tls`` (the listener then speaks only TLS 1.2 or later, port 8883 by default;
``bus/certs.py`` makes the certificates):

    ca.crt              the CA that signed the broker's certificate: ``bus.ca_file`` of every
                        client (copy it to the workers' hosts; it is no secret)
    server.crt          the broker's certificate, for the --tls-host names (default: --bind)
    server.key          its private key

Users and rights (``acl``): ``gliding`` (the processes that hold the root key) reads and writes
everything; a worker ``W`` reads offers, grants, archive and knowledge replies, coherence
fills and events, and writes claims, heartbeats, answers, events, archive notices, archive and
knowledge requests and coherence requests — never an assignment (``job/+/agent/+``), an
offer or a grant. Topics name worker *processes* (``W.<pid>-<hex>``), so the ACL cannot tell
one worker's grants from another's: that is the signatures' job (a worker can check only what
is signed for it).
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gliding.bus.auth import check_name
from gliding.bus.certs import CertificatePems, check_hosts, make_certificates
from gliding.errors import UsageError

JOB_USER = "gliding"
ENVELOPE_ROOM = 1024
PLAIN_PORT, TLS_PORT = 1883, 8883

WORKER_ACL = """\
user {name}
topic read work/+
topic write claims/+
topic write workers/heartbeat
topic read worker/+/grants
topic read worker/+/archive
topic write archive/+/request
topic read worker/+/knowledge
topic write knowledge/+/request
topic write job/+/result/+
topic readwrite job/+/events
topic write job/+/archived
topic write coherence/+/directory
topic read coherence/+/cache/+
"""


@dataclass(frozen=True)
class BrokerFiles:
    """What ``write_broker_config`` wrote."""

    directory: Path
    config: Path
    passwords: dict[str, Path]  # user -> its password file
    url: str  # what clients give as bus.url (mqtts:// with TLS)
    ca_file: Path | None = None  # with TLS: the CA certificate, bus.ca_file of every client


def write_broker_config(directory: Path, *, workers: list[str], port: int | None = None,
                        bind: str = "127.0.0.1",
                        max_message_bytes: int = 16 * 1024 * 1024, tls: bool = False,
                        tls_hosts: list[str] | None = None) -> BrokerFiles:
    """Write a mosquitto configuration with users ``gliding`` and ``workers`` into
    ``directory`` (made 0700; it must not hold a configuration yet). ``port``: 1883, or 8883
    with ``tls``. ``tls``: the listener speaks TLS only, with a new CA and a certificate for
    ``tls_hosts`` (default: ``bind``, and ``localhost`` when that is a loopback address).

    Raises:
        UsageError: a bad worker name, port or TLS host (a wildcard ``bind`` needs
            ``tls_hosts``), ``directory`` holds one already, or ``mosquitto_passwd`` is not
            installed or fails.
    """
    names = [check_name(w) for w in workers]
    if JOB_USER in names or len(set(names)) != len(names):
        raise UsageError(f"worker names must be distinct and not {JOB_USER!r}")
    port = port if port is not None else TLS_PORT if tls else PLAIN_PORT
    if not 1 <= port <= 65535:
        raise UsageError(f"port {port} is out of range", hint="use 1-65535")
    if tls_hosts and not tls:
        raise UsageError("TLS hosts are given without TLS", hint="add --tls")
    hosts = check_hosts(tls_hosts or _default_hosts(bind)) if tls else []
    pems = make_certificates(hosts) if hosts else None  # before any file is written
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise UsageError("mosquitto_passwd is not installed",
                         hint="install Debian's mosquitto package (scripts/setup.sh does)")
    if (directory / "mosquitto.conf").exists():
        raise UsageError(f"{directory / 'mosquitto.conf'} exists already",
                         hint="give another directory")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    directory = directory.resolve()  # mosquitto reads relative paths from where it starts
    config, passwd, acl = directory / "mosquitto.conf", directory / "passwd", directory / "acl"
    passwords: dict[str, Path] = {}
    for user in (JOB_USER, *names):
        secret = secrets.token_urlsafe(24)
        passwords[user] = _private(directory / f"{user}.password", secret + "\n")
        args = [tool, "-b", *(["-c"] if user == JOB_USER else []), str(passwd), user, secret]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise UsageError(f"mosquitto_passwd failed: {done.stderr.strip()[:300]}")
    os.chmod(passwd, 0o600)
    _private(acl, f"user {JOB_USER}\ntopic readwrite #\n\n"
             + "\n".join(WORKER_ACL.format(name=n) for n in names))
    ca_file = None if pems is None else _private(directory / "ca.crt", pems.ca_cert)
    _private(config, "\n".join((
        f"listener {port} {bind}",
        *(() if pems is None else _tls_listener(directory, pems)),
        # as the owner of these 0600 files (mosquitto started as root would switch to its
        # own user, which cannot read them)
        f"user {pwd.getpwuid(os.getuid()).pw_name}",
        "allow_anonymous false",
        f"password_file {passwd}",
        f"acl_file {acl}",
        f"max_packet_size {max_message_bytes + ENVELOPE_ROOM + 1024}",
        "persistence false",
        "set_tcp_nodelay true",
        "log_dest stdout",
        "log_type error",
        "log_type warning",
        "")))
    return BrokerFiles(directory, config, passwords, _client_url(bind, port, hosts), ca_file)


def _tls_listener(directory: Path, pems: CertificatePems) -> list[str]:
    """Write the broker's certificate and key; the listener's lines that use them."""
    cert = _private(directory / "server.crt", pems.server_cert)
    key = _private(directory / "server.key", pems.server_key)
    return [f"cafile {directory / 'ca.crt'}", f"certfile {cert}", f"keyfile {key}",
            "tls_version tlsv1.2"]  # the oldest version it accepts


def _client_url(bind: str, port: int, tls_hosts: list[str]) -> str:
    """The bus.url of a client: mqtts:// to the first certificate name with TLS."""
    host = tls_hosts[0] if tls_hosts else bind
    address = _ip(host)
    if address is not None and address.is_unspecified:
        host = "<this host>"  # listening on every address: clients pick one
    elif address is not None and address.version == 6:
        host = f"[{host}]"
    return f"{'mqtts' if tls_hosts else 'mqtt'}://{host}:{port}"


def _default_hosts(bind: str) -> list[str]:
    """The names a broker's certificate is for when none are given: its bind address (a
    wildcard is refused by ``check_hosts``), and ``localhost`` for a loopback one."""
    address = _ip(bind)
    loopback = address.is_loopback if address is not None else bind == "localhost"
    return [bind, "localhost"] if loopback else [bind]


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, 0o600)
    return path


def read_password(path: Path) -> str:
    """The password in a password file (its first line).

    Raises:
        UsageError: it cannot be read, is empty, or others can read it.
    """
    try:
        info = path.stat()
        if info.st_mode & 0o077:
            raise UsageError(f"the password file {path} is readable by others",
                             hint=f"chmod 600 {path}")
        first = path.read_text(encoding="utf-8").splitlines()[:1]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the password file {path}: {exc}") from exc
    if not first or not first[0].strip():
        raise UsageError(f"the password file {path} is empty")
    return first[0].strip()

"""Where the local servers the benchmarks and integration tests start come from, and how they
are configured: the ``oxigraph`` binary next to this Python, a free loopback port, the
``mosquitto`` broker and its generated config. ``gliding.testing.servers`` starts them for tests
(blocking), ``bench/coherence_procs.py`` for the coherence benchmark (async).
"""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path

OXIGRAPH = Path(sys.executable).parent / "oxigraph"


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


MOSQUITTO_CONFIG = """\
listener {port} 127.0.0.1
allow_anonymous true
persistence false
# no $SYS/broker/... updates: subscribers of $-topics see only what the tests publish
sys_interval 0
# no Nagle on client sockets: small packets (PUBACKs) go out at once
set_tcp_nodelay true
# a subscriber that stops reading keeps this many QoS 1 messages queued at the broker
max_queued_messages 1000000
log_dest stdout
log_type error
log_type warning
"""


def mosquitto_binary() -> str:
    """The path of the ``mosquitto`` broker.

    Raises:
        FileNotFoundError: it is not installed.
    """
    found = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise FileNotFoundError(
            "mosquitto is not installed: run scripts/setup.sh (as root it apt-get installs "
            "mosquitto), or install the Debian package mosquitto yourself")
    return found

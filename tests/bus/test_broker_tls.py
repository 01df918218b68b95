"""`gliding broker init --tls` on a real mosquitto: the broker listens with TLS only, an
``mqtts://`` bus that trusts its ``ca.crt`` exchanges signed messages through it, and a client
that trusts another CA, expects another host name or speaks plain MQTT is refused at once
with a ``BusError`` that says why (not a hang, not a traceback)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from cryptography import x509

from gliding.bus.auth import root_auth
from gliding.bus.broker import write_broker_config
from gliding.bus.certs import check_hosts, make_certificates
from gliding.bus.messages import JobEvent
from gliding.bus.mqtt import MQTTBus
from gliding.errors import BusError, UsageError
from gliding.testing.servers import Mosquitto, free_port
from tests.cli.cli_support import invoke

pytestmark = pytest.mark.timeout(60)
CONNECT_S = 5.0  # each refused client must fail well within this


@dataclass(frozen=True)
class TLSBroker:
    server: Mosquitto
    directory: Path
    output: str  # what `gliding broker init --tls` said

    @property
    def password(self) -> str:
        return (self.directory / "gliding.password").read_text().strip()


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[TLSBroker]:
    """A mosquitto started with the configuration `gliding broker init --tls` wrote."""
    port = free_port()
    done = invoke(["broker", "init", str(tmp_path / "conf"), "--worker", "box1", "--tls",
                   "--port", str(port)], cwd=tmp_path)
    assert done.code == 0, done.stderr
    (tmp_path / "mosquitto").mkdir()
    server = Mosquitto(tmp_path / "mosquitto", port)
    server.config.write_text((tmp_path / "conf" / "mosquitto.conf").read_text())
    server.start()
    try:
        yield TLSBroker(server, (tmp_path / "conf").resolve(), done.stderr)
    finally:
        server.stop()


def test_broker_init_tls_writes_a_ca_and_a_tls_listener_and_says_what_clients_use(
        tls_broker: TLSBroker) -> None:
    conf, port = tls_broker.directory, tls_broker.server.port
    assert {p.name for p in conf.iterdir()} == {
        "mosquitto.conf", "passwd", "acl", "gliding.password", "box1.password",
        "ca.crt", "server.crt", "server.key"}  # and no CA key: nothing can sign another
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in conf.iterdir())
    config = (conf / "mosquitto.conf").read_text().splitlines()
    assert config[:5] == [f"listener {port} 127.0.0.1", f"cafile {conf / 'ca.crt'}",
                          f"certfile {conf / 'server.crt'}", f"keyfile {conf / 'server.key'}",
                          "tls_version tlsv1.2"]
    said = " ".join(tls_broker.output.split())
    assert f"bus.url: mqtts://127.0.0.1:{port}" in said
    assert f"bus.ca_file: {conf / 'ca.crt'}" in said
    ca = x509.load_pem_x509_certificate((conf / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((conf / "server.crt").read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_a_signed_message_crosses_the_tls_broker_and_wrong_clients_are_refused(
        tmp_path: Path, tls_broker: TLSBroker) -> None:
    port, ca_file = tls_broker.server.port, tls_broker.directory / "ca.crt"
    password = tls_broker.password
    auth = root_auth(tmp_path / "bus.key")
    other = write_broker_config(tmp_path / "other", workers=[], port=port, tls=True)
    tries = {
        "another CA": (f"mqtts://127.0.0.1:{port}", other.ca_file),
        "the system's CAs": (f"mqtts://127.0.0.1:{port}", None),
        "plain MQTT": (f"mqtt://127.0.0.1:{port}", None),
    }
    refused: dict[str, tuple[str, str]] = {}

    async def main() -> JobEvent:
        async with MQTTBus(f"mqtts://127.0.0.1:{port}", ca_file=ca_file, auth=auth,
                           username="gliding", password=password) as one, \
                MQTTBus(f"mqtts://localhost:{port}", ca_file=ca_file, auth=auth,
                        username="gliding", password=password) as two, \
                two.subscribe("job/j1/events") as sub:
            await one.publish("job/j1/events", JobEvent(job="j1", event="signed"))
            with anyio.fail_after(10):
                got = (await sub.receive()).message
        for name, (url, ca) in tries.items():
            with pytest.raises(BusError) as caught:
                async with MQTTBus(url, ca_file=ca, connect_timeout_s=CONNECT_S,
                                   username="gliding", password=password):
                    pass
            refused[name] = (caught.value.message, caught.value.hint or "")
        assert isinstance(got, JobEvent)
        return got

    assert anyio.run(main) == JobEvent(job="j1", event="signed")
    for name, (message, _hint) in refused.items():
        assert message.startswith("cannot connect to the MQTT broker at mqtt"), name
        assert f"no answer within {CONNECT_S:g}s" not in message, name  # refused, not timed out
    assert "CERTIFICATE_VERIFY_FAILED" in refused["another CA"][0]
    assert "bus.ca_file" in refused["another CA"][1]
    assert "CERTIFICATE_VERIFY_FAILED" in refused["the system's CAs"][0]
    assert "closed the connection before accepting it" in refused["plain MQTT"][0]
    assert "mqtts://" in refused["plain MQTT"][1]


def test_a_certificate_for_another_host_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mosquitto").mkdir()
    server = Mosquitto(tmp_path / "mosquitto")
    files = write_broker_config(tmp_path / "conf", workers=[], port=server.port, tls=True,
                                tls_hosts=["broker.invalid"])
    server.config.write_text(files.config.read_text())
    password = files.passwords["gliding"].read_text().strip()

    async def main() -> None:
        async with MQTTBus(f"mqtts://127.0.0.1:{server.port}", ca_file=files.ca_file,
                           username="gliding", password=password, connect_timeout_s=CONNECT_S):
            pass

    server.start()
    try:
        with pytest.raises(BusError, match="not valid for '127.0.0.1'"):
            anyio.run(main)
    finally:
        server.stop()


def test_bad_tls_requests_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an address a client connects to"):
        write_broker_config(tmp_path / "a", workers=[], bind="0.0.0.0", tls=True)
    with pytest.raises(UsageError, match="without TLS"):
        write_broker_config(tmp_path / "b", workers=[], tls_hosts=["broker.lan"])
    with pytest.raises(UsageError, match="neither an IP address nor a host name"):
        write_broker_config(tmp_path / "c", workers=[], tls=True, tls_hosts=["bad host"])
    assert not any(tmp_path.iterdir())
    done = invoke(["broker", "init", str(tmp_path / "d"), "--tls", "--bind", "0.0.0.0"],
                  cwd=tmp_path)
    assert done.code == 2 and "--tls-host" in done.stderr and "Traceback" not in done.stderr
    files = write_broker_config(tmp_path / "e", workers=[], bind="0.0.0.0", tls=True,
                                tls_hosts=["broker.lan", "10.0.0.5", "BROKER.lan"])
    assert files.url == "mqtts://broker.lan:8883"
    assert check_hosts(["::1", "a-b.example"]) == ["::1", "a-b.example"]
    pems = make_certificates(["::1"])
    cert = x509.load_pem_x509_certificate(pems.server_cert.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["::1"]


def test_a_ca_file_on_a_plain_url_or_one_that_holds_no_certificate_is_a_bus_error(
        tmp_path: Path) -> None:
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    with pytest.raises(BusError, match="does not use TLS"):
        MQTTBus("mqtt://127.0.0.1:1883", ca_file=tmp_path / "junk.crt")
    with pytest.raises(BusError, match="cannot read bus.ca_file"):
        MQTTBus("mqtts://127.0.0.1:8883", ca_file=tmp_path / "junk.crt")
    with pytest.raises(BusError, match="cannot read bus.ca_file"):
        MQTTBus("mqtts://127.0.0.1:8883", ca_file=tmp_path / "missing.crt")

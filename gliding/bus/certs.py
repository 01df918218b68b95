"""TLS for the bus: the private CA and broker certificate that ``gliding broker init --tls``
writes, and the SSL context an ``mqtts://`` bus connects with.

    pems = make_certificates(["broker.lan", "10.0.0.5"])   # in memory; broker.py writes them
    context = client_context(Path("ca.crt"))              # MQTTBus, for mqtts:// URLs

The CA is made for one broker: it signs the broker's certificate and nothing else, and its
private key is dropped once it has (never written), so no file anywhere can sign a second
certificate that workers would trust. A new ``broker init --tls`` makes a new CA, whose
``ca.crt`` is copied to the workers again. Keys are ECDSA P-256, signatures SHA-256; the CA
is valid ``CA_DAYS``, the broker's certificate ``SERVER_DAYS``.

TLS hides the traffic from whoever is on the network path and proves the broker is the one
the CA vouches for; it does not hide anything from the broker itself (docs/daemon.md, "Trust").
Clients present no certificate: their passwords and signed messages say who they are.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gliding.errors import BusError, UsageError

if TYPE_CHECKING:
    from cryptography import x509

CA_DAYS = 3650
SERVER_DAYS = 3650
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
CA_HINT = ("bus.ca_file must hold the CA certificate that signed the broker's (ca.crt of "
           "`gliding broker init --tls`); unset it to trust the system's CAs")


@dataclass(frozen=True)
class CertificatePems:
    """PEM text of a broker's CA certificate, its certificate and its private key."""

    ca_cert: str
    server_cert: str
    server_key: str


def check_hosts(hosts: list[str]) -> list[str]:
    """``hosts`` (names or addresses a certificate is for), checked and without repeats.

    Raises:
        UsageError: none, or one is neither an IP address nor a DNS name, or is a wildcard
            address (0.0.0.0, ::) that no client connects to.
    """
    checked: list[str] = []
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if len(host) > 253 or not _HOSTNAME.fullmatch(host):
                raise UsageError(f"{host!r} is neither an IP address nor a host name",
                                 hint="give the name or address workers connect to") from None
        else:
            if address.is_unspecified:
                raise UsageError(f"{host} is not an address a client connects to",
                                 hint="give --tls-host NAME: the name or address workers "
                                      "use to reach the broker")
        if host.lower() not in (h.lower() for h in checked):
            checked.append(host)
    if not checked:
        raise UsageError("a TLS certificate needs at least one host name or address",
                         hint="give --tls-host NAME")
    return checked


def make_certificates(hosts: list[str], *, now: datetime.datetime | None = None
                      ) -> CertificatePems:
    """A new CA and a broker certificate it signs for ``hosts`` (names or IP addresses,
    ``check_hosts``), with the broker's private key; the CA's key is not kept.

    Raises:
        UsageError: as ``check_hosts``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    hosts = check_hosts(hosts)
    now = now or datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(minutes=5)  # a client whose clock lags a little
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Gliding broker CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_usage(cert_sign=True), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
              .issuer_name(ca_name).public_key(key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(_usage(cert_sign=False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                             critical=False)
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                  ca_ski), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return CertificatePems(
        ca.public_bytes(pem).decode("ascii"), server.public_bytes(pem).decode("ascii"),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()).decode("ascii"))


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    from cryptography import x509

    return x509.KeyUsage(digital_signature=not cert_sign, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=cert_sign, crl_sign=cert_sign, encipher_only=False,
                         decipher_only=False)


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """The SSL context of an ``mqtts://`` connection: TLS 1.2 at least, the broker's
    certificate checked against ``ca_file`` (None: the system's CAs) and its host name.

    Raises:
        BusError: ``ca_file`` cannot be read or holds no certificate.
    """
    try:
        context = ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise BusError(f"cannot read bus.ca_file {ca_file}: {exc}", hint=CA_HINT) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context

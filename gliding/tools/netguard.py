"""The SSRF guard of every fetch a model asks for: which addresses a URL may reach.

A model chooses the URLs ``web_fetch`` opens, so a page it read can steer it at the host's own
services (a database on loopback, a router on 192.168.0.1, the cloud metadata service at
169.254.169.254). Only globally routable addresses are allowed by default: loopback, private
(RFC 1918, unique local), link-local, carrier-grade NAT, multicast, reserved and unspecified
addresses are refused, IPv4 inside IPv6 (``::ffff:127.0.0.1``, 6to4, NAT64) judged as the IPv4
address it carries. ``tools.web.allow`` lists hosts or networks to allow anyway.

The decision is made on the address that is actually connected to: ``GuardedBackend`` resolves
the name once, checks every address, and connects to a checked one itself, so a name that
resolves differently the second time (DNS rebinding) gains nothing; TLS still verifies the
certificate for the name. Every redirect is a new connection and is checked the same way.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore

from gliding.errors import ToolError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]  # host, port -> addresses

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Policy:
    """What may be reached: public addresses, plus ``hosts`` (names, exact) and ``networks``."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, allow: Iterable[str]) -> Policy:
        """From ``tools.web.allow`` entries: an IP, a CIDR network or a host name.

        Raises:
            ValueError: an entry that is none of them (the settings report it).
        """
        hosts, networks = set(), []
        for raw in allow:
            entry = raw.strip().lower()
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if not entry or any(c in entry for c in "/:@ "):
                    raise ValueError(f"not an address, network or host name: {raw!r}") from None
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def host_allowed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def refusal(self, address: str) -> str | None:
        """Why ``address`` may not be reached, or None when it may."""
        try:
            ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address!r} is not an IP address"
        if any(ip in net for net in self.networks if net.version == ip.version):
            return None
        carried = _carried_ipv4(ip)
        if carried is not None:
            if any(carried in net for net in self.networks if net.version == 4):
                return None
            ip = carried
        kind = _special(ip)
        return None if kind is None else f"{ip} is a {kind} address"


def _carried_ipv4(ip: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, NAT64), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _special(ip: Address) -> str | None:
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata lives here)"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "carrier-grade NAT"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for ``host``."""
    infos = await anyio.getaddrinfo(host, port, type=0)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses ``policy`` allows, after
    resolving the name itself (once a connection)."""

    def __init__(self, policy: Policy, resolve: Resolver = system_resolver,
                 inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self.resolve = resolve
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        address = await self.pick(host, port)
        return await self.inner.connect_tcp(address, port, timeout=timeout,
                                            local_address=local_address,
                                            socket_options=socket_options)

    async def pick(self, host: str, port: int) -> str:
        """The address to connect to for ``host``.

        Raises:
            ToolError: the name resolves to no allowed address (or does not resolve).
        """
        literal = _literal(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                addresses = await self.resolve(host, port)
            except OSError as exc:
                raise ToolError(f"cannot resolve {host}: {exc}") from exc
            if not addresses:
                raise ToolError(f"{host} resolves to no address")
        if literal is None and self.policy.host_allowed(host):
            return addresses[0]
        refusals = [(a, self.policy.refusal(a)) for a in addresses]
        allowed = [a for a, why in refusals if why is None]
        if not allowed:
            why = "; ".join(f"{r}" for _, r in refusals if r)
            raise ToolError(
                f"refused to connect to {host}: {why}",
                hint="only public addresses may be fetched; an operator may allow more with "
                     "tools.web.allow")
        return allowed[0]

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def _literal(host: str) -> str | None:
    """``host`` when it is an IP address literal (brackets removed), else None."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        return None
    return bare


def check_url_host(host: str, policy: Policy) -> None:
    """Refuse an IP literal the policy forbids before any request is made (the backend checks
    every connection again).

    Raises:
        ToolError: ``host`` is a forbidden IP literal.
    """
    literal = _literal(host)
    if literal is not None and (why := policy.refusal(literal)) is not None:
        raise ToolError(f"refused to connect to {host}: {why}",
                             hint="only public addresses may be fetched; an operator may allow "
                                  "more with tools.web.allow")

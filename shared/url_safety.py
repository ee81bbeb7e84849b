"""Outgoing URLs the server calls on a caller's behalf (webhook targets): HTTPS only, and never an address inside
the network the server runs in.

A URL is checked twice: when it is given (``422 unsafe_url``), and again right before each request, because what a
host name resolves to can change after it was accepted (DNS rebinding). The second check resolves the name and
refuses the request if **any** address it resolves to is loopback, private, link-local, multicast, reserved,
unspecified or a cloud metadata address (IPv4 ``169.254.169.254``, the EC2 IPv6 ``fd00:ec2::254``).

``allow_loopback`` (``WEBHOOK_ALLOW_LOOPBACK``, ``make dev`` only: the settings refuse it inside Lambda) lets a
developer's receiver on ``127.0.0.1``/``::1`` be called, over plain ``http`` too; nothing else is relaxed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from shared.errors import InvalidRequest

MAX_URL_CHARS = 2048
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""Resolves ``(host, port)`` to IP address strings (the default: ``getaddrinfo`` in a thread)."""

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(InvalidRequest):
    """A URL the server will not call (422 ``unsafe_url``); ``details`` names the field and the reason."""

    code = "unsafe_url"


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (TCP), without blocking the event loop."""
    infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _refuse(reason: str, field: str) -> UnsafeUrl:
    loc: list[str | int] = [int(part) if part.isdigit() else part for part in field.split(".")]
    return UnsafeUrl(
        f"the URL cannot be used: {reason}",
        details=[{"loc": loc, "msg": reason, "type": "value_error"}],
    )


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def address_problem(address: IpAddress, *, allow_loopback: bool) -> str | None:
    """Why the server must not connect to ``address`` (None: it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return None if allow_loopback else "loopback address"
    if address in METADATA_ADDRESSES:
        return "cloud metadata address"
    for problem, hit in (
        ("link-local address", address.is_link_local),
        ("private address", address.is_private),
        ("multicast address", address.is_multicast),
        ("reserved address", address.is_reserved),
        ("unspecified address", address.is_unspecified),
        ("not a global address", not address.is_global),
    ):
        if hit:
            return problem
    return None


def check_url_shape(url: str, *, allow_loopback: bool, field: str = "url") -> tuple[str, int]:
    """The host and port of ``url`` once its form is acceptable: ``https`` with a host and no credentials (plain
    ``http`` only to a loopback literal or ``localhost`` with ``allow_loopback``). No name is resolved here.

    Raises:
        UnsafeUrl: naming what is wrong.
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise _refuse(f"must be a URL of 1-{MAX_URL_CHARS} characters", field)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refuse("not a valid URL", field) from exc
    host = parts.hostname
    if not host:
        raise _refuse("no host", field)
    if parts.username or parts.password:
        raise _refuse("credentials in the URL", field)
    literal = _literal(host)
    local = host == "localhost" or (literal is not None and literal.is_loopback)
    if parts.scheme != "https" and not (parts.scheme == "http" and allow_loopback and local):
        raise _refuse("only https URLs are called", field)
    if literal is not None and (problem := address_problem(literal, allow_loopback=allow_loopback)):
        raise _refuse(problem, field)
    return host, port or (443 if parts.scheme == "https" else 80)


async def check_url(url: str, *, allow_loopback: bool, field: str = "url", resolver: Resolver = resolve) -> list[str]:
    """Check ``url``'s form, resolve its host and check every address; the addresses when all are safe.

    Raises:
        UnsafeUrl: the form, a name that does not resolve, or an address the server must not call.
    """
    host, port = check_url_shape(url, allow_loopback=allow_loopback, field=field)
    try:
        addresses = list(await resolver(host, port))
    except OSError as exc:
        raise _refuse("the host name does not resolve", field) from exc
    if not addresses:
        raise _refuse("the host name does not resolve", field)
    for text in addresses:
        address = _literal(text.split("%", 1)[0])
        problem = "unparseable address" if address is None else address_problem(address, allow_loopback=allow_loopback)
        if problem:
            raise _refuse(f"{host} resolves to a {problem}" if address is not None else problem, field)
    return addresses

"""A client's URL source, checked without fetching it: the server never requests a client's URL.

Only ``https``, and only to a public address: the host is resolved (``socket.getaddrinfo``, in a worker thread)
and every address it resolves to must be global, so the URL cannot point the provider (or anything that later
follows it) at loopback, private, link-local or cloud metadata addresses. Anything else is ``422 unsafe_url``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from shared.errors import InvalidRequest

MAX_URL_CHARS = 2_048


def _unsafe(reason: str, loc: list[str | int]) -> InvalidRequest:
    return InvalidRequest(
        f"this URL source is refused: {reason}",
        code="unsafe_url",
        details=[{"loc": loc, "msg": reason, "type": "value_error"}],
    )


async def check_url(url: str, loc: list[str | int]) -> None:
    """Refuse ``url`` unless it is https to a host whose every address is public (``InvalidRequest`` ``unsafe_url``)."""
    if len(url) > MAX_URL_CHARS:
        raise _unsafe(f"longer than {MAX_URL_CHARS} characters", loc)
    parts = urlsplit(url)
    if parts.scheme.lower() != "https":
        raise _unsafe("only https URLs are accepted", loc)
    if parts.username or parts.password:
        raise _unsafe("a URL with credentials is refused", loc)
    host = parts.hostname
    if not host:
        raise _unsafe("the URL has no host", loc)
    try:
        port = parts.port or 443
    except ValueError as exc:
        raise _unsafe("the URL's port is invalid", loc) from exc
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise _unsafe("the host does not resolve", loc) from exc
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            raise _unsafe("the host resolves to a loopback, private, link-local or reserved address", loc)

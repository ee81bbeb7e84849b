"""POSTs a webhook over HTTP(S) with httpx2, connecting only to an address the URL check accepted.

The request goes to the checked IP address itself, with the URL's host name in the ``Host`` header and as the TLS
server name (SNI, and what the certificate is verified against), so a DNS answer that changes between the check and
the connection (rebinding) is never followed. Redirects are not followed either: a 3xx is a failed attempt.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx2

from shared.webhooks.ports import PostFailed


def pinned_url(url: str, address: str) -> str:
    """``url`` with its host replaced by ``address`` (bracketed when IPv6), port and path kept."""
    parts = urlsplit(url)
    host = f"[{address}]" if ipaddress.ip_address(address.split("%", 1)[0]).version == 6 else address
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


class HttpWebhookPoster:
    async def post(
        self, url: str, *, addresses: Sequence[str], body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        parts = urlsplit(url)
        host = parts.hostname or ""
        sent = {**headers, "host": parts.netloc.rsplit("@", 1)[-1], "user-agent": "agent-backend-webhooks/1"}
        try:
            async with httpx2.AsyncClient(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
                response = await client.post(
                    pinned_url(url, addresses[0]),
                    content=body,
                    headers=sent,
                    extensions={"sni_hostname": host},
                )
        except httpx2.HTTPError as exc:
            raise PostFailed(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code

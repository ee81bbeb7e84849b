"""An offline token issuer for the benchmarks: an RS256 key pair made here, its JWKS served over local HTTP.

The deployed API checks bearer tokens with ``AUTH_MODE=jwks``: RS256 against the issuer's key set, fetched over
HTTP by ``PyJWKClient``. :func:`local_issuer` makes the same check possible without a network: a fresh key pair, a
stdlib HTTP server in a thread answering the key set, the settings that point the verifier at it, and a token
signed with the key (as a client holds one: the same text for every request until it expires).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

KEY_ID = "bench-key-1"
ISSUER = "https://issuer.bench.invalid/"
AUDIENCE = "agent-api"


@dataclass(frozen=True)
class LocalIssuer:
    settings: dict[str, Any]
    """The overrides that make a ``TokenVerifier`` check against this issuer (``AUTH_MODE=jwks``)."""
    private_key: rsa.RSAPrivateKey

    def token(self, *, user_id: str, tenant_id: str, ttl_s: int = 3600) -> str:
        """A RS256 token for ``user_id`` of ``tenant_id``, as the issuer signs one."""
        now = int(time.time())
        claims = {
            "sub": user_id,
            "tenant_id": tenant_id,
            "scope": "",
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": now,
            "nbf": now,
            "exp": now + ttl_s,
        }
        return jwt.encode(claims, self.private_key, algorithm="RS256", headers={"kid": KEY_ID})


def _handler(body: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class KeySet(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return KeySet


@contextlib.contextmanager
def local_issuer() -> Iterator[LocalIssuer]:
    """A key pair (RSA 2048, as Cognito's) and its key set served on localhost until the block ends."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": KEY_ID, "alg": "RS256", "use": "sig"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(json.dumps({"keys": [jwk]}).encode()))
    thread = threading.Thread(target=server.serve_forever, name="bench-jwks", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    settings = {"auth_mode": "jwks", "jwks_url": url, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}
    try:
        yield LocalIssuer(settings, key)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

"""Bearer-token identity: RS256 against the issuer's JWKS on AWS, HS256 with a shared secret locally.

Exactly one algorithm is accepted per mode, so a token signed with another one (``none``, or HS256 with the RSA
public key as secret) is rejected before its claims are read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import jwt

from shared.errors import ConfigurationError, Forbidden, Unauthenticated
from shared.models import Identity
from shared.settings import Settings
from shared.tenancy import ServedTenants

AUDIT_SCOPE = "agent:audit"
ERASE_SCOPE = "agent:erase"
ADMIN_SCOPE = "agent:admin"


def require_admin(caller: Identity) -> Identity:
    """``caller`` when it holds the tenant admin scope; ``403 missing_scope`` otherwise (every admin endpoint)."""
    if not caller.has_scope(ADMIN_SCOPE):
        raise Forbidden(f"this endpoint needs the {ADMIN_SCOPE} scope", code="missing_scope")
    return caller
"""A tenant administrator: reads and sets the limits of the users of their own tenant, reads its usage."""
"""Needed to delete the caller's own account data (``DELETE /api/v1/me``): a token an app holds for chatting
cannot wipe the user out; the identity provider grants it to the account-settings client only."""


LEEWAY_S = 30
"""Clock skew allowed on ``exp`` and ``nbf``."""


class TokenVerifier:
    """Checks a bearer token in full on every request: algorithm, signature, claims.

    A verified token is not remembered: a memory of verified tokens (keyed by the token's text) saved 0.3-0.7 % of
    the time to first text on the deployed path, RS256 against a JWKS in a worker thread (docs/benchmarks.md §8),
    and about 0.24 ms of CPU per request, under the 2 % that a mechanism must buy there to stay."""

    def __init__(self, settings: Settings, *, served: ServedTenants | None = None) -> None:
        self._settings = settings
        self._served = served if served is not None else ServedTenants(settings.served_tenants)
        self._jwks: jwt.PyJWKClient | None = None
        if settings.auth_mode == "hs256" and not settings.jwt_secret:
            raise ConfigurationError("AUTH_MODE=hs256 needs JWT_SECRET")
        if settings.auth_mode == "jwks" and not settings.jwks_url:
            raise ConfigurationError("AUTH_MODE=jwks needs JWKS_URL")

    @property
    def may_block(self) -> bool:
        """Whether ``verify`` can wait on the network: with a JWKS, an unknown key id fetches the issuer's key set.
        An HS256 check is a few microseconds of CPU and is done on the event loop."""
        return self._settings.auth_mode != "hs256"

    def _key_and_algorithm(self, token: str) -> tuple[Any, str]:
        if self._settings.auth_mode == "hs256":
            return self._settings.jwt_secret, "HS256"
        if self._jwks is None:
            # The key set is fetched lazily and cached (keys for 1 h), and refetched on an unknown key id.
            self._jwks = jwt.PyJWKClient(self._settings.jwks_url or "", cache_keys=True, lifespan=3600)
        try:
            return self._jwks.get_signing_key_from_jwt(token).key, "RS256"
        except jwt.PyJWKClientError as exc:
            raise Unauthenticated("token signing key not found", code="invalid_token") from exc

    def verify(self, authorization: str | None) -> Identity:
        """The identity the bearer token in ``authorization`` carries; Unauthenticated when there is none or the
        check fails, NotFound (``tenant_not_served``) when its tenant is not one this stack serves: every route
        that reads the caller is refused there, before it reads or writes anything (shared.tenancy)."""
        token = _bearer(authorization)
        if token is None:
            raise Unauthenticated("missing bearer token", code="missing_token")
        identity = self._check(token)
        self._served.check(identity.tenant_id)
        return identity

    def _check(self, token: str) -> Identity:
        """The full check: algorithm, signature, claims."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated("malformed token", code="invalid_token") from exc
        expected_alg = "HS256" if self._settings.auth_mode == "hs256" else "RS256"
        if header.get("alg") != expected_alg:
            raise Unauthenticated("token algorithm not accepted", code="invalid_token")
        key, alg = self._key_and_algorithm(token)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self._settings.jwt_audience,
                issuer=self._settings.jwt_issuer,
                options={"require": ["exp", "sub"]},
                leeway=LEEWAY_S,
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("token expired", code="token_expired") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated("token rejected", code="invalid_token") from exc
        user = claims.get(self._settings.jwt_user_claim)
        tenant = claims.get(self._settings.jwt_tenant_claim)
        if not isinstance(user, str) or not user or not isinstance(tenant, str) or not tenant:
            raise Unauthenticated("token lacks user or tenant", code="invalid_token")
        raw_scopes = claims.get(self._settings.jwt_scope_claim, "")
        scopes = raw_scopes.split() if isinstance(raw_scopes, str) else [s for s in raw_scopes if isinstance(s, str)]
        return Identity(tenant_id=tenant, user_id=user, scopes=frozenset(scopes))


def _bearer(authorization: str | None) -> str | None:
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip()


def mint_local_token(
    secret: str,
    *,
    user_id: str,
    tenant_id: str,
    scopes: Iterable[str] = (),
    ttl_s: int = 24 * 3600,
    issuer: str | None = None,
    audience: str | None = None,
) -> str:
    """A HS256 token for local use and tests."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": user_id,
        "tenant_id": tenant_id,
        "scope": " ".join(scopes),
        "iat": now,
        "nbf": now,
        "exp": now + ttl_s,
    }
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm="HS256")

"""The verifier remembers tokens it checked: a repeated token is not checked again, and nothing else gets in."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest

from shared import auth
from shared.auth import LEEWAY_S, VERIFIED_FOR_S, VERIFIED_TOKENS, TokenVerifier, mint_local_token
from shared.errors import Unauthenticated
from shared.models import Identity
from tests.support.settings import TEST_SECRET, make_settings


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every full check (signature and claims) the verifier makes, by token."""
    seen: list[str] = []
    decode = jwt.decode

    def counted(token: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(auth.jwt, "decode", counted)
    return seen


def header(token: str) -> str:
    return f"Bearer {token}"


def test_a_repeated_token_is_checked_once(checks: list[str]) -> None:
    verifier = TokenVerifier(make_settings())
    token = mint_local_token(TEST_SECRET, user_id="u-1", tenant_id="t-1", scopes=("agent:audit",))
    identities = [verifier.verify(header(token)) for _ in range(3)]
    assert identities == [Identity(tenant_id="t-1", user_id="u-1", scopes=frozenset({"agent:audit"}))] * 3
    assert checks == [token]
    assert verifier.remembered(header(token)) == identities[0]


def test_a_remembered_token_is_checked_again_once_expired_or_after_the_recheck_interval(checks: list[str]) -> None:
    clock = Clock()
    verifier = TokenVerifier(make_settings(), clock=clock)
    short = mint_local_token(TEST_SECRET, user_id="u-1", tenant_id="t-1", ttl_s=60)
    long = mint_local_token(TEST_SECRET, user_id="u-2", tenant_id="t-1", ttl_s=3600)
    verifier.verify(header(short))
    verifier.verify(header(long))
    clock.now += 60 + LEEWAY_S + 1  # past the short token's expiry and leeway
    assert verifier.remembered(header(short)) is None
    assert verifier.remembered(header(long)) is not None
    clock.now += VERIFIED_FOR_S
    assert verifier.remembered(header(long)) is None
    verifier.verify(header(long))
    assert checks == [short, long, long]


def test_an_expired_token_is_never_remembered(checks: list[str]) -> None:
    verifier = TokenVerifier(make_settings())
    now = int(time.time())
    expired = jwt.encode({"sub": "u-1", "tenant_id": "t-1", "exp": now - LEEWAY_S - 60}, TEST_SECRET, algorithm="HS256")
    for _ in range(2):
        with pytest.raises(Unauthenticated) as refused:
            verifier.verify(header(expired))
        assert refused.value.code == "token_expired"
    assert checks == [expired, expired]
    assert verifier.remembered(header(expired)) is None


def _swap_claims(token: str, **claims: Any) -> str:
    """The token with other claims and its own (now wrong) signature."""
    head, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    decoded.update(claims)
    forged = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{signature}"


def test_altered_copies_of_a_remembered_token_are_refused(checks: list[str]) -> None:
    verifier = TokenVerifier(make_settings())
    token = mint_local_token(TEST_SECRET, user_id="u-1", tenant_id="t-1")
    verifier.verify(header(token))
    last = token[-1]
    forgeries = {
        "signature changed": token[:-2] + ("A" if token[-2] != "A" else "B") + last,
        "another user, same signature": _swap_claims(token, sub="u-2"),
        "another tenant, same signature": _swap_claims(token, tenant_id="t-2"),
        "more scopes, same signature": _swap_claims(token, scope="agent:audit agent:erase"),
    }
    for name, forged in forgeries.items():
        assert verifier.remembered(header(forged)) is None, name
        with pytest.raises(Unauthenticated):
            verifier.verify(header(forged))
    assert verifier.verify(header(token)).user_id == "u-1"


def test_the_memory_is_bounded_and_drops_the_least_recently_used(checks: list[str]) -> None:
    verifier = TokenVerifier(make_settings())
    tokens = [mint_local_token(TEST_SECRET, user_id=f"u-{i}", tenant_id="t-1") for i in range(VERIFIED_TOKENS + 1)]
    verifier.verify(header(tokens[0]))
    for token in tokens[1:-1]:
        verifier.verify(header(token))
    verifier.verify(header(tokens[0]))  # used again: now the most recent
    verifier.verify(header(tokens[-1]))  # one too many: the least recently used (tokens[1]) goes
    assert verifier.remembered(header(tokens[0])) is not None
    assert verifier.remembered(header(tokens[1])) is None
    assert verifier.remembered(header(tokens[2])) is not None
    assert len(checks) == VERIFIED_TOKENS + 1


def test_a_missing_or_malformed_header_is_refused_and_remembers_nothing() -> None:
    verifier = TokenVerifier(make_settings())
    for value in (None, "", "Basic abc", "Bearer not-a-jwt"):
        assert verifier.remembered(value) is None
        with pytest.raises(Unauthenticated):
            verifier.verify(value)

"""Bearer tokens signed with the test secret, as a client of the API sends them."""

from __future__ import annotations

from shared.auth import mint_local_token
from tests.support.settings import TEST_SECRET


def bearer(user: str = "user-1", tenant: str = "tenant-1", scopes: tuple[str, ...] = ()) -> dict[str, str]:
    """The ``Authorization`` header of a caller ``user`` of ``tenant`` holding ``scopes``."""
    return {"Authorization": f"Bearer {mint_local_token(TEST_SECRET, user_id=user, tenant_id=tenant, scopes=scopes)}"}

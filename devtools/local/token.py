"""``make token``: print a HS256 token that ``make dev`` accepts (USER_ID, TENANT_ID, SCOPES choose the claims)."""

from __future__ import annotations

import os

from shared.auth import mint_local_token
from shared.settings import LOCAL_JWT_SECRET


def main() -> None:
    print(
        mint_local_token(
            os.environ.get("JWT_SECRET") or LOCAL_JWT_SECRET,
            user_id=os.environ.get("USER_ID") or "local-user",
            tenant_id=os.environ.get("TENANT_ID") or "local-tenant",
            scopes=(os.environ.get("SCOPES") or "").split(),
        )
    )


if __name__ == "__main__":
    main()

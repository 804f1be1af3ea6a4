"""Client authentication: HS256-signed tokens naming a user and a tenant.

Pure (no I/O): the edge verifies, `mint_token` issues (dev CLI, tests, an auth service).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import jwt

from ws_edge.errors import AuthError

ALGORITHM = "HS256"
API_KEY_PREFIX = "tsk-"  # a tenant's API key (ws_edge.api_keys), not a signed token
TENANT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ISSUER = "turnstream"


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: str
    tenant_id: str
    expires_at_s: float = float("inf")  # the token's `exp`: the session ends with it

    @property
    def owner(self) -> str:
        """The value that marks a conversation as this principal's (unambiguous whatever
        characters the ids hold: ("a/b", "c") and ("a", "b/c") differ)."""
        return json.dumps([self.tenant_id, self.user_id], separators=(",", ":"))


def is_api_key(token: str | None) -> bool:
    return token is not None and token.startswith(API_KEY_PREFIX)


def mint_token(secret: str, user_id: str, tenant_id: str = "default", ttl_s: int = 86400) -> str:
    now = int(time.time())
    claims = {"sub": user_id, "tenant": tenant_id, "iat": now, "exp": now + ttl_s, "iss": ISSUER}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str) -> Principal:
    """Return the token's principal or raise `AuthError` with a precise code."""
    if not token:
        raise AuthError("no token given", code="unauthenticated")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            options={"require": ["sub", "exp", "iss"]},
        )
    except jwt.ExpiredSignatureError:
        raise AuthError("token expired", code="token_expired") from None
    except jwt.InvalidTokenError as exc:
        raise AuthError(f"token rejected: {exc}", code="token_invalid") from None
    tenant = claims.get("tenant", "default")
    if not isinstance(claims["sub"], str) or not claims["sub"]:
        raise AuthError("token claim sub must be a non-empty string", code="token_invalid")
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise AuthError(
            f"token claim tenant must match {TENANT_ID.pattern} (it names Redis keys)",
            code="token_invalid",
        )
    return Principal(user_id=claims["sub"], tenant_id=tenant, expires_at_s=float(claims["exp"]))

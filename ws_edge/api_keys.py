"""Per-tenant API keys: what an application puts where OpenAI's key goes, revocable at once.

A key is `tsk-` and 32 random URL-safe characters. Only its SHA-256 digest is stored (a
copy of Redis reveals no key); the digest's first 12 hex characters are the key's `id`,
which lists and revocations name. A key resolves to a principal (its tenant and the user it
was issued for) on every request, so a revoked key stops working on the next one (a
WebSocket session opened with it keeps its session, as with an expired token's).
`python -m infra.api_keys` creates, lists and revokes them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.channels import RedisNames
from ws_edge.auth import API_KEY_PREFIX, TENANT_ID, Principal
from ws_edge.errors import AuthError, StoreUnavailable

ID_CHARS = 12


class ApiKeyRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    digest: str  # SHA-256 of the key, hex
    tenant_id: str
    user_id: str
    label: str = ""
    created_at_s: float = 0.0
    revoked_at_s: float | None = None


def new_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(24)  # 32 characters, 192 bits


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id(key: str) -> str:
    return digest_of(key)[:ID_CHARS]


class ApiKeys:
    """The keys in Redis (under the deployment's namespace)."""

    def __init__(self, redis: Redis, names: RedisNames) -> None:
        self.redis = redis
        self.names = names

    async def create(self, tenant_id: str, user_id: str, *, label: str, now_s: float) -> str:
        if not TENANT_ID.fullmatch(tenant_id) or not user_id:
            raise AuthError(f"tenant {tenant_id!r} / user {user_id!r} cannot hold a key")
        key = new_key()
        record = ApiKeyRecord(digest_of(key), tenant_id, user_id, label, now_s)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.names.api_key_key(key_id(key)), msgspec.json.encode(record))
            pipe.sadd(self.names.tenant_api_keys_key(tenant_id), key_id(key))
            await pipe.execute()
        return key

    async def revoke(self, id_: str, *, now_s: float) -> ApiKeyRecord | None:
        """Revoke the key `id_` (kept, marked, for the audit); None: no such key."""
        record = await self._record(id_)
        if record is None:
            return None
        if record.revoked_at_s is None:
            record = msgspec.structs.replace(record, revoked_at_s=now_s)
            await self.redis.set(self.names.api_key_key(id_), msgspec.json.encode(record))
        return record

    async def listed(self, tenant_id: str) -> list[tuple[str, ApiKeyRecord]]:
        ids = sorted(
            i.decode() for i in await self.redis.smembers(self.names.tenant_api_keys_key(tenant_id))
        )
        records = [await self._record(i) for i in ids]
        return [(i, r) for i, r in zip(ids, records, strict=True) if r is not None]

    async def resolve(self, key: str) -> Principal:
        """The key's principal, or `AuthError` (unknown: token_invalid; revoked:
        key_revoked), or `StoreUnavailable` when Redis does not answer."""
        digest = digest_of(key)
        try:
            record = await self._record(digest[:ID_CHARS])
        except RedisError as exc:
            raise StoreUnavailable(f"API keys unavailable, retry: {exc}") from None
        if record is None or not hmac.compare_digest(record.digest, digest):
            raise AuthError("API key not recognised", code="token_invalid")
        if record.revoked_at_s is not None:
            raise AuthError("API key revoked", code="key_revoked")
        return Principal(user_id=record.user_id, tenant_id=record.tenant_id)

    async def _record(self, id_: str) -> ApiKeyRecord | None:
        raw = await self.redis.get(self.names.api_key_key(id_))
        if raw is None:
            return None
        return msgspec.json.decode(raw, type=ApiKeyRecord)

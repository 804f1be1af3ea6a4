"""The HTTP status and OpenAI error type of each of the protocol's error codes (pure).

The codes are the WebSocket protocol's (`ws_edge.errors`, the workers' in-band codes); the
HTTP door adds only the status, OpenAI's error `type`, and the retry headers OpenAI's SDKs
read: `Retry-After` / `retry-after-ms` when a retry may succeed later, and
`x-should-retry` so an SDK neither retries a request that cannot succeed nor gives up on
one that can.
"""

from __future__ import annotations

import math

STATUS: dict[str, int] = {
    "malformed_json": 400,
    "unknown_type": 400,
    "invalid_message": 400,
    "unsupported_parameter": 400,
    "unknown_voice": 400,
    "invalid_response_format": 400,
    "response_format_unsupported": 400,
    "invalid_tools": 400,
    "stale_tool_result": 409,  # the result answers a call the conversation moved past
    "input_blocked": 400,
    "image_blocked": 400,
    "unauthenticated": 401,
    "token_invalid": 401,
    "token_expired": 401,
    "key_revoked": 401,
    "forbidden_conversation": 403,
    "unknown_turn": 404,
    "not_found": 404,
    "too_many_turns": 409,
    "message_too_large": 413,
    "media_too_large": 413,
    "rate_limited": 429,
    "overloaded": 503,
    "broker_unavailable": 503,
    "store_unavailable": 503,
    "tools_unavailable": 503,
}
_KIND = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def http_status(code: str, retryable: bool) -> int:
    """An unknown code is a server error: 503 when a retry may succeed, else 500."""
    return STATUS.get(code, 503 if retryable else 500)


def error_kind(status: int) -> str:
    return _KIND.get(status, "server_error")


def retry_headers(retryable: bool, retry_after_ms: int | None) -> dict[str, str]:
    headers = {"x-should-retry": "true" if retryable else "false"}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_ms / 1000)))
    return headers

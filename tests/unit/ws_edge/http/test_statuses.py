"""Each protocol error code has its HTTP status, and the retry headers OpenAI's SDKs read."""

from __future__ import annotations

from ws_edge.http.statuses import error_kind, http_status, retry_headers


def test_codes_map_to_the_statuses_openai_clients_expect():
    assert http_status("unsupported_parameter", False) == 400
    assert http_status("token_expired", False) == 401
    assert http_status("forbidden_conversation", False) == 403
    assert http_status("unknown_turn", False) == 404
    assert http_status("too_many_turns", True) == 409
    assert http_status("media_too_large", False) == 413
    assert http_status("rate_limited", True) == 429
    assert http_status("overloaded", True) == 503
    assert http_status("broker_unavailable", True) == 503


def test_an_unknown_code_is_a_server_error_retryable_or_not():
    assert http_status("engine_error", True) == 503
    assert http_status("internal_error", False) == 500
    assert error_kind(500) == "server_error" and error_kind(429) == "rate_limit_error"


def test_retry_headers_say_when_and_whether():
    assert retry_headers(False, None) == {"x-should-retry": "false"}
    headers = retry_headers(True, 1500)
    assert headers == {"x-should-retry": "true", "retry-after-ms": "1500", "Retry-After": "2"}


def test_a_bad_schema_or_tool_is_the_clients_error_not_the_servers():
    for code in ("invalid_response_format", "response_format_unsupported", "invalid_tools"):
        assert http_status(code, False) == 400, code
    assert http_status("stale_tool_result", False) == 409

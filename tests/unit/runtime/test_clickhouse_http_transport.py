"""How a request's URL parameters say it is to be served, and the values a server refuses."""

from __future__ import annotations

import gzip
import zlib

import pytest

from runtime.clickhouse.http_protocol import RequestError, split_params
from runtime.clickhouse.http_transport import (
    DEFAULT_SESSION_TIMEOUT_S,
    SessionAsk,
    Transport,
    http_compress,
    transport_of,
)


def test_nothing_asked_is_the_plain_transport():
    assert transport_of({"query": "SELECT 1"}) == Transport()


def test_each_parameter_is_read():
    asked = transport_of(
        {
            "session_id": "s1",
            "session_timeout": "120",
            "session_check": "1",
            "compress": "1",
            "decompress": "true",
            "client_protocol_version": "54460",
            "enable_http_compression": "1",
            "http_zlib_compression_level": "6",
            "send_progress_in_http_headers": "1",
        },
        accept_encoding="br;q=1.0, deflate, gzip",
    )
    assert asked == Transport(
        session=SessionAsk("s1", 120, True),
        compress=True,
        decompress=True,
        revision=54460,
        http_encoding="gzip",
        zlib_level=6,
        progress=True,
    )
    assert transport_of({"session_id": "s"}).session == SessionAsk(
        "s", DEFAULT_SESSION_TIMEOUT_S, False
    )


def test_answers_compress_only_when_enabled_and_accepted():
    assert transport_of({}, "gzip").http_encoding == ""
    assert transport_of({"enable_http_compression": "1"}, "br, xz").http_encoding == ""
    assert transport_of({"enable_http_compression": "1"}, "zstd").http_encoding == "zstd"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"role": "analyst"}, 511),
        ({"session_id": "s", "session_timeout": "3601"}, 36),
        ({"session_id": "s", "session_timeout": "-1"}, 6),
        ({"client_protocol_version": "54460x"}, 6),
        ({"compress": "yes"}, 6),
    ],
)
def test_values_a_server_refuses(params, code):
    with pytest.raises(RequestError) as refused:
        transport_of(params)
    assert refused.value.number == code


def test_http_settings_reach_the_engine_and_transport_does_not():
    settings, _ = split_params(
        {
            "enable_http_compression": "1",
            "send_progress_in_http_headers": "1",
            "session_id": "s",
            "compress": "1",
            "client_protocol_version": "1",
        }
    )
    assert settings == {"enable_http_compression": "1", "send_progress_in_http_headers": "1"}


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd", "lz4"])
def test_http_compress_round_trips(encoding):
    body = b"turn\t1\n" * 1000
    packed = http_compress(body, encoding, 3)
    assert packed != body
    if encoding == "gzip":
        assert gzip.decompress(packed) == body
    elif encoding == "deflate":
        assert zlib.decompress(packed) == body
    elif encoding == "zstd":
        from backports import zstd

        assert zstd.decompress(packed) == body
    else:
        import lz4.frame

        assert lz4.frame.decompress(packed) == body

"""How a request asks to be served, from its URL parameters, as ClickHouse's HTTP handler
reads them: sessions, ClickHouse-framed compression both ways, the Native revision, HTTP
compression of the answer, progress headers, roles. Every parameter is either served or
refused with ClickHouse's own error; none is dropped without a word.

Served as a server with `wait_end_of_query=1` serves them: results are materialized before
the first byte, so `buffer_size` and `wait_end_of_query` change nothing, and progress is
one `X-ClickHouse-Progress` header with the final counts. `quota_key` is accepted (this
interface keeps no quotas). There are no roles: any `role` is UNKNOWN_ROLE.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.clickhouse.http_protocol import RequestError

DEFAULT_SESSION_TIMEOUT_S = 60  # a server's default_session_timeout
MAX_SESSION_TIMEOUT_S = 3600  # and max_session_timeout
# Accept-Encoding values answered when enable_http_compression=1, in order of preference
SERVED_ENCODINGS = ("gzip", "deflate", "zstd", "lz4")

CANNOT_PARSE_TEXT = 6
BAD_ARGUMENTS = 36
UNKNOWN_ROLE = 511


@dataclass(frozen=True, slots=True)
class SessionAsk:
    """`session_id` with its timeout, and whether it must exist already."""

    session_id: str
    timeout_s: int
    check: bool


@dataclass(frozen=True, slots=True)
class Transport:
    session: SessionAsk | None = None
    compress: bool = False  # answer in ClickHouse's compressed blocks
    decompress: bool = False  # the body is in ClickHouse's compressed blocks
    revision: int = 0  # client_protocol_version: the Native output's revision
    http_encoding: str = ""  # Content-Encoding of the answer ("" = none)
    zlib_level: int = 3  # http_zlib_compression_level
    progress: bool = False  # send_progress_in_http_headers


def transport_of(params: Mapping[str, str], accept_encoding: str = "") -> Transport:
    """The request's transport asks; raises RequestError with ClickHouse's code for a value
    a server refuses."""
    if params.get("role"):
        role = params["role"]
        raise RequestError(UNKNOWN_ROLE, f"There is no role `{role}` in user directories")
    return Transport(
        session=_session(params),
        compress=_flag(params, "compress"),
        decompress=_flag(params, "decompress"),
        revision=_unsigned(params, "client_protocol_version", 0),
        http_encoding=_encoding(accept_encoding)
        if _flag(params, "enable_http_compression")
        else "",
        zlib_level=min(9, _unsigned(params, "http_zlib_compression_level", 3)),
        progress=_flag(params, "send_progress_in_http_headers"),
    )


def _session(params: Mapping[str, str]) -> SessionAsk | None:
    session_id = params.get("session_id", "")
    if not session_id:
        return None
    timeout = _unsigned(params, "session_timeout", DEFAULT_SESSION_TIMEOUT_S)
    if timeout > MAX_SESSION_TIMEOUT_S:
        raise RequestError(
            BAD_ARGUMENTS,
            f"Session timeout '{timeout}' is larger than max_session_timeout: "
            f"{MAX_SESSION_TIMEOUT_S}. Maximum session timeout could be modified in "
            "configuration file.",
        )
    return SessionAsk(session_id, timeout, _flag(params, "session_check"))


def _encoding(accept_encoding: str) -> str:
    """The first encoding a server prefers among those the client accepts."""
    offered = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    return next((name for name in SERVED_ENCODINGS if name in offered), "")


def _flag(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "0").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false", ""):
        return False
    raise RequestError(CANNOT_PARSE_TEXT, f"Cannot parse boolean {name} from '{value}'")


def _unsigned(params: Mapping[str, str], name: str, default: int) -> int:
    value = params.get(name, "")
    if not value:
        return default
    if not value.isdigit():
        raise RequestError(CANNOT_PARSE_TEXT, f"Cannot parse UInt64 {name} from '{value}'")
    return int(value)


def http_compress(body: bytes, encoding: str, level: int) -> bytes:
    """The answer in its Content-Encoding (`encoding` is one of SERVED_ENCODINGS)."""
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=max(1, level))
    if encoding == "deflate":
        return zlib.compress(body, level)
    if encoding == "zstd":
        from backports import zstd

        return zstd.compress(body)
    if encoding == "lz4":
        import lz4.frame

        return lz4.frame.compress(body)
    return body

"""The ClickHouse HTTP interface's conventions, as pure functions (no engine, no socket).

The sink serves this interface over its embedded engine so analysts and clickhouse-connect
can query while the sink owns the data directory. Each rule lives here so it is unit-tested
on its own: how the statement is assembled from the `query` URL parameter and the body,
where the data of an `INSERT ... FORMAT X` starts, which URL parameters are settings or bind
parameters, how a body is decompressed and which error code maps to which HTTP status.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from runtime.errors import PlumbingError

DEFAULT_FORMAT = "TabSeparated"  # ClickHouse's default output format over HTTP

# URL parameters the HTTP layer consumes (`http_transport` reads the ones that change how
# the request is served); every other parameter that is not `param_<name>` is an engine
# setting, including those the HTTP layer also reads (enable_http_compression,
# send_progress_in_http_headers, ...), which the engine knows as settings too.
TRANSPORT_PARAMS = frozenset(
    {
        "query",
        "database",
        "default_format",
        "query_id",
        "user",
        "password",
        "quota_key",
        "role",
        "session_id",
        "session_timeout",
        "session_check",
        "buffer_size",
        "wait_end_of_query",
        "compress",
        "decompress",
        "client_protocol_version",
    }
)

# Statements whose first word makes them return a result set (even an empty one).
RESULT_STATEMENTS = frozenset(
    {"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS", "CHECK", "("}
)

# ClickHouse error codes → HTTP status, as the server's HTTP handler maps them (a subset;
# anything else is 500). 429/503/504 are avoided: clickhouse-connect retries those.
_STATUS_BY_CODE = {
    516: 401,  # AUTHENTICATION_FAILED
    6: 400,  # CANNOT_PARSE_TEXT
    27: 400,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    36: 400,  # BAD_ARGUMENTS
    38: 400,  # CANNOT_PARSE_DATE
    41: 400,  # CANNOT_PARSE_DATETIME
    43: 400,  # ILLEGAL_TYPE_OF_ARGUMENT
    47: 400,  # UNKNOWN_IDENTIFIER
    53: 400,  # TYPE_MISMATCH
    62: 400,  # SYNTAX_ERROR
    69: 400,  # ARGUMENT_OUT_OF_BOUND
    72: 400,  # CANNOT_PARSE_NUMBER
    117: 400,  # INCORRECT_DATA
    164: 400,  # READONLY
    271: 400,  # CANNOT_DECOMPRESS
    372: 404,  # SESSION_NOT_FOUND
    46: 404,  # UNKNOWN_FUNCTION
    50: 404,  # UNKNOWN_TYPE
    60: 404,  # UNKNOWN_TABLE
    73: 404,  # UNKNOWN_FORMAT
    81: 404,  # UNKNOWN_DATABASE
    115: 404,  # UNKNOWN_SETTING
    48: 501,  # NOT_IMPLEMENTED
}
STD_EXCEPTION = 1001  # the code of an engine failure that carries none

_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE = re.compile(r"Code: (\d+)\.")
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPACE = b" \t\r\n\f\v"


class RequestError(PlumbingError):
    """A request refused before it reaches the engine, with its ClickHouse error number."""

    code = "clickhouse_request_refused"

    def __init__(self, number: int, message: str) -> None:
        super().__init__(message)
        self.number = number
        self.message = message


@dataclass(frozen=True, slots=True)
class InsertData:
    """`INSERT INTO t (cols) [SETTINGS ...] FORMAT X` and the data after it: `head` is the
    statement up to its SETTINGS clause (or FORMAT), `settings` that clause or ""."""

    head: str
    settings: str
    fmt: str
    data: bytes

    def infile_sql(self, path: str) -> str:
        """The same insert reading its data from `path` (chdb takes data through a file;
        FROM INFILE must come before SETTINGS and FORMAT)."""
        quoted = "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"
        settings = f" {self.settings}" if self.settings else ""
        return f"{self.head} FROM INFILE {quoted}{settings} FORMAT {self.fmt}"


@dataclass(frozen=True, slots=True)
class HttpQuery:
    """One request, parsed: a statement to run, or an insert with its data."""

    sql: str
    insert: InsertData | None
    database: str
    default_format: str
    query_id: str
    readonly: bool  # GET requests run with readonly=2, as on a server
    settings: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)

    @property
    def output_format(self) -> str | None:
        """The format of the response body; None for a statement without a result set."""
        if self.insert is not None:
            return None
        explicit = explicit_format(self.sql)
        if explicit is not None:
            return explicit
        return self.default_format if produces_result(self.sql) else None


def parse_request(
    method: str, url_params: Iterable[tuple[str, str]], body: bytes, fallback_query_id: str
) -> HttpQuery:
    """Assemble the request as ClickHouse does: the `query` parameter, a newline, then the
    body; for an `INSERT ... FORMAT X` the rest of the body after the format is its data."""
    params = dict(url_params)
    query = params.get("query", "")
    text = (query + "\n").encode() + body if query else body
    insert = split_insert(text)
    sql = ""
    if insert is None:
        try:
            sql = text.decode().strip()
        except UnicodeDecodeError as err:
            raise RequestError(36, f"The query is not valid UTF-8: {err}") from None
        if not sql:
            raise RequestError(62, "Empty query")
    settings, binds = split_params(params)
    return HttpQuery(
        sql=sql,
        insert=insert,
        database=params.get("database", ""),
        default_format=params.get("default_format") or DEFAULT_FORMAT,
        query_id=params.get("query_id") or fallback_query_id,
        readonly=method.upper() == "GET",
        settings=settings,
        params=binds,
    )


def split_params(params: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(settings, bind parameters by bare name); transport parameters are dropped and a
    setting name that is not an identifier is refused (it is written into SET)."""
    settings: dict[str, str] = {}
    binds: dict[str, str] = {}
    for name, value in params.items():
        if name.startswith("param_"):
            binds[name.removeprefix("param_")] = value
        elif name not in TRANSPORT_PARAMS:
            if not _SETTING_NAME.match(name):
                raise RequestError(115, f"Unknown setting '{name}'")
            settings[name] = value
    return settings, binds


def set_statement(name: str, value: str) -> str:
    """`SET name = 'value'` (ClickHouse converts a quoted literal to the setting's type)."""
    if not _SETTING_NAME.match(name):
        raise RequestError(115, f"Unknown setting '{name}'")
    return f"SET {name} = {quote_string(value)}"


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def tokens(text: bytes) -> Iterator[tuple[str, int, int, int]]:
    """(token, start, end, depth) of a statement: words upper-cased, a quoted string or
    identifier as its quote character, any other symbol one byte; whitespace and comments
    skipped. `depth` is the parenthesis depth outside the token."""
    i, depth, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in _SPACE:
            i += 1
        elif text.startswith(b"--", i) or c == ord("#"):
            end = text.find(b"\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith(b"/*", i):
            end = text.find(b"*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in b"'\"`":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == ord("\\") else 1
            yield chr(c), i, min(j + 1, n), depth
            i = j + 1
        elif c in _WORD_BYTES or c >= 0x80:
            j = i + 1
            while j < n and (text[j] in _WORD_BYTES or text[j] >= 0x80):
                j += 1
            yield text[i:j].decode(errors="replace").upper(), i, j, depth
            i = j
        else:
            if c == ord(")"):
                depth = max(0, depth - 1)
            yield chr(c), i, i + 1, depth
            if c == ord("("):
                depth += 1
            i += 1


def statement_kind(sql: str) -> str:
    """The first token of the statement, upper-cased ("" for none)."""
    return next((tok for tok, *_ in tokens(sql.encode())), "")


def produces_result(sql: str) -> bool:
    return statement_kind(sql) in RESULT_STATEMENTS


def explicit_format(sql: str) -> str | None:
    """The name in a top-level `FORMAT name` clause ending the statement (optionally
    followed by SETTINGS or `;`), e.g. `SELECT 1 FORMAT JSON`; not `SELECT format FROM t`."""
    raw = sql.encode()
    clause = _format_clause(raw)
    return None if clause is None else raw[clause[1] : clause[2]].decode()


def without_format(sql: str) -> str:
    """The statement without its top-level `FORMAT name` clause (to EXPLAIN it in a format
    of our choosing)."""
    raw = sql.encode()
    clause = _format_clause(raw)
    return sql if clause is None else (raw[: clause[0]] + b" " + raw[clause[2] :]).decode()


def _format_clause(raw: bytes) -> tuple[int, int, int] | None:
    """(where FORMAT starts, where its name starts, where the name ends) of the statement's
    top-level format clause, or None."""
    top = [(tok, start, end) for tok, start, end, depth in tokens(raw) if depth == 0]
    for k in range(len(top) - 1, 0, -1):
        if top[k - 1][0] != "FORMAT" or not _is_word(top[k][0]):
            continue
        after = top[k + 1][0] if k + 1 < len(top) else ""
        if after in ("", ";", "SETTINGS"):
            return top[k - 1][1], top[k][1], top[k][2]
    return None


def split_insert(text: bytes) -> InsertData | None:
    """An `INSERT ... FORMAT X` statement and its inline data; None for anything else
    (including `INSERT ... VALUES (...)` and `INSERT ... SELECT`, run as they are). Data
    starts after the format name and the spaces and one line break that follow it."""
    settings_at: int | None = None
    previous = ""
    stream = tokens(text)
    first = next(stream, None)
    if first is None or first[0] != "INSERT":
        return None
    for tok, start, _end, depth in stream:
        if depth > 0:
            previous = tok
            continue
        if tok in ("VALUES", "SELECT", "WITH"):
            return None
        if tok == "SETTINGS":
            settings_at = start
        elif tok == "FORMAT" and previous not in ("INTO", "TABLE", "."):
            name = next(stream, None)
            if name is None or not _is_word(name[0]):
                return None  # malformed: the engine says so in its own words
            data_at = _data_start(text, name[2])
            head_end = settings_at if settings_at is not None else start
            return InsertData(
                head=text[:head_end].decode().strip(),
                settings=text[settings_at:start].decode().strip()
                if settings_at is not None
                else "",
                fmt=text[name[1] : name[2]].decode(),
                data=text[data_at:],
            )
        previous = tok
    return None


def _data_start(text: bytes, after_name: int) -> int:
    i = after_name
    while i < len(text) and text[i] in b" \t":
        i += 1
    if text.startswith(b"\r\n", i):
        return i + 2
    if text.startswith(b"\n", i):
        return i + 1
    return i


def _is_word(token: str) -> bool:
    return bool(token) and (token[0].isalnum() or token[0] == "_")


def decompress_body(body: bytes, content_encoding: str) -> bytes:
    """Undo the request's Content-Encoding (clickhouse-connect sends lz4 frames, one per
    block, zstd, gzip or deflate); several encodings are undone last first."""
    encodings = [e.strip().lower() for e in content_encoding.split(",") if e.strip()]
    for encoding in reversed(encodings):
        body = _decompress_one(body, encoding)
    return body


def _decompress_one(body: bytes, encoding: str) -> bytes:
    try:
        if encoding in ("identity", ""):
            return body
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, no zlib header
        if encoding == "lz4":
            return _lz4_frames(body)
        if encoding == "zstd":
            from backports import zstd

            return zstd.decompress(body)
        if encoding == "br":
            import brotli

            return brotli.decompress(body)
    except ImportError:
        pass
    except Exception as err:
        raise RequestError(36, f"Cannot decompress the {encoding} request body: {err}") from None
    raise RequestError(36, f"Unsupported Content-Encoding: {encoding}")


def _lz4_frames(body: bytes) -> bytes:
    """Concatenated LZ4 frames (lz4.frame.decompress stops after the first)."""
    import lz4.frame

    out = bytearray()
    rest = body
    while rest:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out += decompressor.decompress(rest)
        if not decompressor.eof:
            raise ValueError("truncated LZ4 frame")
        rest = decompressor.unused_data or b""
    return bytes(out)


def error_code(message: str) -> int:
    """The code in an engine message (`Code: 62. DB::Exception: ...`)."""
    match = _CODE.search(message)
    return int(match[1]) if match else STD_EXCEPTION


def error_body(code: int, message: str) -> str:
    """The body ClickHouse sends for an error (from `Code: ` on, one line feed)."""
    at = message.find("Code: ")
    if at >= 0:
        return message[at:].strip() + "\n"
    return f"Code: {code}. DB::Exception: {message.strip()}\n"


def http_status(code: int) -> int:
    return _STATUS_BY_CODE.get(code, 500)


def content_type(fmt: str | None) -> str:
    """The Content-Type a server gives a response in `fmt`."""
    name = (fmt or "").lower()
    if name.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    if name.startswith("csv"):
        return "text/csv; charset=UTF-8; header=absent"
    if name.startswith("json"):
        return "application/json; charset=UTF-8"
    if name in ("native", "rowbinary", "parquet", "arrow", "arrowstream", "orc", "avro"):
        return "application/octet-stream"
    return "text/plain; charset=UTF-8"

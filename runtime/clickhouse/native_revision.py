"""Native format at a client's protocol revision: what a server sends over HTTP when the
request says `client_protocol_version=N` (clickhouse-go always does, and reads its answers
that way).

The embedded engine writes Native at revision 0 only (no way to hand it the client's
revision). At revision > 0 a server adds each block's BlockInfo before it, and from
54454 (custom serialization) one byte after each column's type saying the column is not
sparse. Both need the column boundaries, so this walks the column data by type (numbers,
strings, dates, decimals, Nullable, Array, Tuple, Map, LowCardinality with its state
prefixes and granules, Enum, UUID, IP). A type whose layout is not walked here (JSON,
Dynamic, Variant, aggregate states) is refused with ClickHouse's NOT_IMPLEMENTED rather
than sent wrong.
"""

from __future__ import annotations

import re

from runtime.clickhouse.http_protocol import RequestError

CUSTOM_SERIALIZATION = 54454  # DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION
NOT_IMPLEMENTED = 48
# is_overflows (field 1) false, bucket_num (field 2) -1, end of fields: as a server writes it
BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"

_FIXED = {
    "UInt8": 1, "Int8": 1, "Bool": 1, "Nothing": 1, "Enum8": 1,
    "UInt16": 2, "Int16": 2, "Date": 2, "Enum16": 2, "BFloat16": 2,
    "UInt32": 4, "Int32": 4, "Float32": 4, "Date32": 4, "DateTime": 4, "IPv4": 4,
    "Decimal32": 4, "Time": 4,
    "UInt64": 8, "Int64": 8, "Float64": 8, "DateTime64": 8, "Decimal64": 8, "Time64": 8,
    "UInt128": 16, "Int128": 16, "UUID": 16, "IPv6": 16, "Decimal128": 16,
    "UInt256": 32, "Int256": 32, "Decimal256": 32,
}  # fmt: skip
_NEEDS_GLOBAL_DICTIONARY = 1 << 8
_HAS_ADDITIONAL_KEYS = 1 << 9
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def varint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str:
        size = self.varint()
        self.at += size
        return self.data[self.at - size : self.at].decode()

    def skip(self, size: int) -> None:
        if self.at + size > len(self.data):
            raise IndexError("column data past the end of the stream")
        self.at += size

    def u64s(self, count: int) -> list[int]:
        start = self.at
        self.skip(8 * count)
        raw = self.data[start : self.at]
        return [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]


def at_revision(native: bytes, revision: int) -> bytes:
    """`native` (revision 0, any number of blocks) as a server writes it for `revision`."""
    if revision <= 0:
        return native
    reader = _Reader(native)
    out = bytearray()
    try:
        while reader.at < len(native):
            out += BLOCK_INFO
            start = reader.at
            columns, rows = reader.varint(), reader.varint()
            out += native[start : reader.at]
            for _ in range(columns):
                start = reader.at
                reader.string()
                kind = reader.string()
                out += native[start : reader.at]
                if revision >= CUSTOM_SERIALIZATION:
                    out.append(0)  # no custom (sparse) serialization
                start = reader.at
                if rows:
                    _skip_prefixes(reader, kind)
                    _skip_column(reader, kind, rows)
                out += native[start : reader.at]
    except (IndexError, UnicodeDecodeError) as err:
        raise RequestError(NOT_IMPLEMENTED, f"Cannot re-encode Native output: {err}") from None
    return bytes(out)


def _skip_prefixes(reader: _Reader, kind: str) -> None:
    """A column's state prefixes come before its data, nested ones first: one UInt64 (the
    keys' version) per LowCardinality in the type."""
    name, args = split_type(kind)
    if name == "LowCardinality":
        reader.skip(8)
    elif name in ("Array", "Nullable", "Map"):
        for arg in args:
            _skip_prefixes(reader, arg)
    elif name == "Tuple":
        for element in args:
            _skip_prefixes(reader, _element_type(element))


def _skip_low_cardinality(reader: _Reader, keys_type: str, rows: int) -> None:
    """Granules of (flags and index width, additional keys, row count, indexes) until
    `rows` rows are read; a column that needs a shared dictionary is not walked."""
    while rows > 0:
        (flags,) = reader.u64s(1)
        if flags & _NEEDS_GLOBAL_DICTIONARY:
            raise _unsupported(f"LowCardinality({keys_type}) with a shared dictionary")
        if flags & _HAS_ADDITIONAL_KEYS:
            (keys,) = reader.u64s(1)
            _skip_column(reader, keys_type, keys)
        (granule,) = reader.u64s(1)
        reader.skip(granule * (1 << (flags & 0xFF)))
        rows -= granule


def _skip_column(reader: _Reader, kind: str, rows: int) -> None:
    """Move past `rows` values of type `kind` in Native's layout."""
    name, args = split_type(kind)
    if name in _FIXED:
        reader.skip(_FIXED[name] * rows)
    elif name == "Decimal":
        reader.skip(_decimal_bytes(int(args[0])) * rows)
    elif name == "FixedString":
        reader.skip(int(args[0]) * rows)
    elif name == "String":
        for _ in range(rows):
            reader.skip(reader.varint())
    elif name == "Nullable":
        reader.skip(rows)  # the null map
        _skip_column(reader, args[0], rows)
    elif name == "Array":
        offsets = reader.u64s(rows)
        _skip_column(reader, args[0], offsets[-1] if offsets else 0)
    elif name == "Map":
        offsets = reader.u64s(rows)
        total = offsets[-1] if offsets else 0
        _skip_column(reader, args[0], total)
        _skip_column(reader, args[1], total)
    elif name == "Tuple":
        for element in args:
            _skip_column(reader, _element_type(element), rows)
    elif name == "LowCardinality":
        keys_name, keys_args = split_type(args[0])
        _skip_low_cardinality(reader, keys_args[0] if keys_name == "Nullable" else args[0], rows)
    elif name == "SimpleAggregateFunction":
        _skip_column(reader, args[-1], rows)
    else:
        raise _unsupported(kind)


def _decimal_bytes(precision: int) -> int:
    return 4 if precision <= 9 else 8 if precision <= 18 else 16 if precision <= 38 else 32


def _unsupported(kind: str) -> RequestError:
    return RequestError(
        NOT_IMPLEMENTED,
        f"Native output of type {kind} with client_protocol_version is not implemented "
        "by this interface; ask for another format (e.g. RowBinaryWithNamesAndTypes)",
    )


def _element_type(element: str) -> str:
    """A tuple element's type without its name (`a String` → `String`)."""
    head, _, rest = element.partition(" ")
    if rest and _NAME.match(head) and head not in _FIXED and "(" not in head:
        return rest.strip()
    return element


def split_type(kind: str) -> tuple[str, list[str]]:
    """`Map(String, Array(UInt8))` → ("Map", ["String", "Array(UInt8)"]): the top-level
    arguments, split on commas outside parentheses and quotes."""
    kind = kind.strip()
    if "(" not in kind:
        return kind, []
    name, inner = kind[: kind.index("(")], kind[kind.index("(") + 1 : kind.rindex(")")]
    args, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(inner):
        if quote:
            if char == quote and inner[i - 1] != "\\":
                quote = ""
        elif char in "'`\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    args.append(inner[start:].strip())
    return name.strip(), args

"""Native at a client's revision: the engine's revision-0 blocks with BlockInfo before each
block and the serialization byte after each column's type, found by walking every column
kind's layout (a wrong walk puts the byte inside some column's data)."""

from __future__ import annotations

import chdb
import pytest

from runtime.clickhouse.http_protocol import RequestError
from runtime.clickhouse.native_revision import BLOCK_INFO, at_revision, split_type

EXPRESSIONS = [
    "number",
    "toString(number)",
    "toLowCardinality(toString(number % 3))",
    "toLowCardinality(toNullable(if(number % 2, NULL, toString(number))))",
    "[toLowCardinality(toString(number)), 'x']",
    "if(number % 2, NULL, number)",
    "range(number)",
    "[[if(number % 2, NULL, 'a')], []]",
    "map('k', [toString(number)], 'j', [])",
    "(number, toString(number))::Tuple(a UInt64, b String)",
    "(toLowCardinality('a'), [1.5])",
    "toDecimal64(number, 3)",
    "toDecimal128(number, 2)",
    "toDateTime64(number, 3, 'UTC')",
    "toDateTime(number, 'Europe/Paris')",
    "toDate(number)",
    "NULL",
    "toFixedString('ab', 2)",
    "CAST(if(number % 2, 'a', 'b,c'), 'Enum8(\\'a\\' = 1, \\'b,c\\' = 2)')",
    "generateUUIDv4()",
    "toIPv6('::1')",
    "number % 2 = 0",
]


def native(expression: str, rows: int = 5, block: int = 2) -> bytes:
    sql = f"SELECT {expression} AS c, 'end' AS z FROM numbers({rows})"
    return chdb.query(f"{sql} SETTINGS max_block_size = {block}", "Native").bytes()


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_serialization_byte_lands_after_each_type_of_each_block(expression):
    raw = native(expression)
    blocks = raw.count(b"\x01z\x06String")
    out = at_revision(raw, 54460)
    assert out.count(b"\x01z\x06String\x00\x03end") == blocks == 3
    assert out.count(BLOCK_INFO) >= blocks and out.startswith(BLOCK_INFO)
    assert len(out) == len(raw) + blocks * (len(BLOCK_INFO) + 2)


def test_below_custom_serialization_only_block_info_is_added():
    raw = native("toString(number)")
    out = at_revision(raw, 54453)
    assert out.count(b"\x01z\x06String\x03end") == 3 and len(out) == len(raw) + 3 * 8
    assert at_revision(raw, 0) == raw


def test_an_empty_result_has_its_header_block():
    raw = chdb.query("SELECT toString(number) AS s FROM numbers(0)", "Native").bytes()
    assert at_revision(raw, 54460) == (BLOCK_INFO + raw + b"\x00" if raw else b"")


def test_a_type_it_cannot_walk_is_refused_not_sent_wrong():
    raw = native("CAST(number, 'Dynamic')")
    with pytest.raises(RequestError) as refused:
        at_revision(raw, 54460)
    assert refused.value.number == 48 and "Dynamic" in refused.value.message


def test_split_type():
    assert split_type("Map(String, Array(Tuple(a UInt8, b String)))") == (
        "Map",
        ["String", "Array(Tuple(a UInt8, b String))"],
    )
    assert split_type("Enum8('a,b' = 1, 'c' = 2)") == ("Enum8", ["'a,b' = 1", "'c' = 2"])
    assert split_type("UInt8") == ("UInt8", [])

"""ClickHouse's compressed blocks: round trips for each method, blocks of 1 MiB, and a
changed or cut byte refused with a server's code. (Checked against clickhouse-go's reader
and writer in tests/integration/test_analyst_clients.py.)"""

from __future__ import annotations

import os

import pytest

from runtime.clickhouse import compressed_blocks as blocks
from runtime.clickhouse.http_protocol import RequestError


@pytest.mark.parametrize("method", [blocks.LZ4, blocks.ZSTD, blocks.NONE])
def test_round_trip_in_blocks_of_a_mebibyte(method):
    data = os.urandom(1000) * 2500  # 2.5 MB: three blocks
    framed = blocks.compress(data, method)
    assert framed[16] == method
    assert blocks.decompress(framed) == data
    assert blocks.compress(b"") == b"" and blocks.decompress(b"") == b""


def test_a_changed_byte_fails_the_checksum_and_a_cut_block_is_refused():
    framed = bytearray(blocks.compress(b"SELECT 1\n" * 100))
    framed[30] ^= 1
    with pytest.raises(RequestError) as corrupt:
        blocks.decompress(bytes(framed))
    assert corrupt.value.number == blocks.CHECKSUM_DOESNT_MATCH
    with pytest.raises(RequestError) as cut:
        blocks.decompress(blocks.compress(b"x" * 100)[:-3])
    assert cut.value.number == blocks.CANNOT_DECOMPRESS


def test_an_unknown_method_is_refused():
    with pytest.raises(RequestError) as unknown:
        blocks.compress(b"x", 0x07)
    assert unknown.value.number == blocks.UNKNOWN_COMPRESSION_METHOD

"""ClickHouse's own compressed framing (`compress=1` / `decompress=1` over HTTP, the
native protocol's blocks): each block is a 16-byte CityHash128 of what follows, a method
byte, the compressed size (with the 9-byte header) and the raw size as little-endian
UInt32, then the payload. clickhouse-go asks for it when its compression is LZ4 or ZSTD.
"""

from __future__ import annotations

import struct

from runtime.clickhouse.http_protocol import RequestError

NONE, LZ4, ZSTD = 0x02, 0x82, 0x90
HEADER = struct.Struct("<BII")
BLOCK_BYTES = 1 << 20  # raw bytes per block, as a server's max_compress_block_size
CHECKSUM_DOESNT_MATCH = 40
UNKNOWN_COMPRESSION_METHOD = 89
CANNOT_DECOMPRESS = 271


def _checksum(framed: bytes) -> bytes:
    from clickhouse_cityhash.cityhash import CityHash128  # the analytics extra

    value = CityHash128(framed)
    return struct.pack("<QQ", value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF)  # high half first


def compress(data: bytes, method: int = LZ4) -> bytes:
    """`data` as a sequence of compressed blocks (none for empty data)."""
    out = bytearray()
    for start in range(0, len(data), BLOCK_BYTES):
        raw = data[start : start + BLOCK_BYTES]
        payload = _pack(raw, method)
        framed = HEADER.pack(method, HEADER.size + len(payload), len(raw)) + payload
        out += _checksum(framed) + framed
    return bytes(out)


def decompress(data: bytes) -> bytes:
    """The raw bytes of a sequence of compressed blocks, each checked against its sum."""
    out = bytearray()
    at = 0
    while at < len(data):
        if at + 16 + HEADER.size > len(data):
            raise RequestError(CANNOT_DECOMPRESS, "Truncated compressed block header")
        method, size, raw_size = HEADER.unpack_from(data, at + 16)
        framed = data[at + 16 : at + 16 + size]
        if size < HEADER.size or len(framed) != size:
            raise RequestError(CANNOT_DECOMPRESS, "Truncated compressed block")
        if _checksum(framed) != data[at : at + 16]:
            raise RequestError(CHECKSUM_DOESNT_MATCH, "Checksum doesn't match: corrupted data")
        out += _unpack(framed[HEADER.size :], method, raw_size)
        at += 16 + size
    return bytes(out)


def _pack(raw: bytes, method: int) -> bytes:
    if method == LZ4:
        import lz4.block

        return lz4.block.compress(raw, store_size=False)
    if method == ZSTD:
        from backports import zstd

        return zstd.compress(raw)
    if method == NONE:
        return raw
    raise RequestError(UNKNOWN_COMPRESSION_METHOD, f"Unknown compression method: {method:#x}")


def _unpack(payload: bytes, method: int, raw_size: int) -> bytes:
    try:
        if method == LZ4:
            import lz4.block

            return lz4.block.decompress(payload, uncompressed_size=raw_size)
        if method == ZSTD:
            from backports import zstd

            return zstd.decompress(payload)
        if method == NONE:
            return payload
    except Exception as err:
        raise RequestError(CANNOT_DECOMPRESS, f"Cannot decompress a block: {err}") from None
    raise RequestError(UNKNOWN_COMPRESSION_METHOD, f"Unknown compression method: {method:#x}")

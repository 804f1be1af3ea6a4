"""A key-value store MCP server over streamable HTTP, with side effects on the books:

    python -m harness.mcp_servers.kv_store --port 8931 --books /tmp/kv-books.jsonl

Every `put` appends a line to the books (the side effect an auditor counts) with the
idempotency key the caller sent in the request's `_meta` (`io.turnstream/idempotency-key`),
so a test sees both how many times a write ran and which call each one was."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("kv")
STORE: dict[str, str] = {}
BOOKS: list[Path] = []
LINGER_S: list[float] = [0.0]  # every put's `linger_s` unless the call sets its own
IDEMPOTENCY_META = "io.turnstream/idempotency-key"


@server.tool(description="Store a value under a key (a side effect)")
async def put(
    key: str, value: str, ctx: Context, delay_s: float = 0.0, linger_s: float = 0.0
) -> str:
    """`delay_s`: wait that long before writing (a test stops the call meanwhile);
    `linger_s`: wait that long after writing, before answering (a test kills the caller
    meanwhile: the effect happened, its caller never heard)."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    STORE[key] = value
    meta = ctx.request_context.meta
    idempotency = _get(meta, IDEMPOTENCY_META)
    with BOOKS[0].open("a") as books:
        books.write(json.dumps({"key": key, "value": value, "idempotency": idempotency}) + "\n")
    linger_s = linger_s or LINGER_S[0]
    if linger_s > 0:
        await asyncio.sleep(linger_s)
    return f"stored {key}"


@server.tool(
    description="Read the value stored under a key",
    annotations=ToolAnnotations(read_only_hint=True),
)
def get(key: str) -> str:
    return STORE.get(key, "")


def _get(meta: object, key: str) -> str:
    """A `_meta` entry, whether the SDK hands `_meta` over as a mapping or a model."""
    if meta is None:
        return ""
    if isinstance(meta, dict):
        return str(meta.get(key, ""))
    extra = getattr(meta, "model_extra", None) or {}
    return str(extra.get(key, ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--books", type=Path, required=True)
    parser.add_argument(
        "--linger-s", type=float, default=0.0, help="answer every put this long after its write"
    )
    args = parser.parse_args()
    BOOKS.append(args.books)
    LINGER_S[0] = args.linger_s
    server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()

"""The client protocol as an AsyncAPI 3.0 document, built from the msgspec types.

Why: client authors generate code and docs from a machine-readable spec instead of reading
`ws_edge/messages.py`, and CI keeps it true: the committed `docs/protocol/asyncapi.json` must
equal `build_spec()` (tests/unit/ws_edge/test_protocol_spec.py), so a change to the messages that is
not regenerated fails the build.

    python -m infra.protocol_spec            # print the document (JSON)
    python -m infra.protocol_spec --write    # regenerate docs/protocol/asyncapi.json
    python -m infra.protocol_spec --check    # exit 1, with what differs, if it is stale

Payload schemas come from `msgspec.json.schema_components` on the two unions, one component
per struct or enum (named after the class); the only rewrite is `discriminator`, which
msgspec writes in OpenAPI's form (`{propertyName, mapping}`) and AsyncAPI's schema format
takes as the property name alone. Each concrete message is one AsyncAPI message named by
its `type` tag (`turn.create`), titled by its class, summarised by its docstring's first
sentence. There is one channel, the WebSocket endpoint `/`; `receive` lists what the edge
receives (client messages) and `send` what it sends (server events).

Versions: `info.version` is `{PROTOCOL_VERSION}.{PROTOCOL_MINOR}.{PROTOCOL_PATCH}`. The major
is the wire protocol `session.ready.protocol` announces; the minor counts the additive
changes of that protocol (docs/protocol/CHANGELOG.md, whose newest entry must match). Bump
the minor, add a changelog entry and run `--write` when a message or field is added.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ws_edge.messages import PROTOCOL_VERSION, AnyClientMessage, AnyServerEvent

PROTOCOL_MINOR = 19  # the 1.x changelog's entries after 1.0.0 (see docs/protocol/CHANGELOG.md)
PROTOCOL_PATCH = 0
SPEC_VERSION = f"{PROTOCOL_VERSION}.{PROTOCOL_MINOR}.{PROTOCOL_PATCH}"
SPEC_PATH = Path(__file__).resolve().parents[1] / "docs" / "protocol" / "asyncapi.json"
REGENERATE = "python -m infra.protocol_spec --write"

CHANNEL = "edge"
REF = "#/components/schemas/{name}"
# Messages whose struct has no docstring: their one-line summary.
SUMMARIES = {
    "session.authenticate": "Authenticate with a signed token (first, or after token_expired).",
    "turn.cancel": "Cancel one of this session's turns; its response.done follows.",
    "audio.clear": "Drop the audio buffered in a stream.",
    "ping": "Ask for a pong (echoing `id`).",
    "session.ready": "The session is authenticated; `protocol` is the protocol's major version.",
    "turn.accepted": "The turn is durably accepted (Kafka acked it); its answer will come.",
    "response.started": "Generation of the answer started on `model`.",
    "response.delta": "The next piece of the answer's text (`seq` from 0, increasing; a "
    "skipped seq means the edge joined frames that came together or queued behind a slow "
    "reader: the text is whole).",
    "response.done": "The answer ended (exactly one per accepted turn), with its whole text.",
    "feedback.recorded": "The feedback was recorded.",
    "error": "A request failed: a stable `code`, a message for humans, retry advice.",
    "pong": "The answer to a ping.",
}
DESCRIPTION = """\
The turnstream edge's client protocol: JSON text frames over one WebSocket, both directions.
Additive changes bump the minor version, so a v1 client must ignore event types and fields
it does not know; the edge rejects unknown client fields (`invalid_message`).
`session.ready.protocol` is the major version. Changes: docs/protocol/CHANGELOG.md."""
AUTH = """\
Authenticate with a signed HS256 token, one of: the `Authorization: Bearer <token>` header
of the handshake (wins when both are given), the `token` query parameter (`/?token=...`), or
a `session.authenticate` message (before anything but `ping`). `session.ready` says it
worked; other messages before it get `unauthenticated`."""


def _tag(cls: type) -> str:
    return cls.__struct_config__.tag  # type: ignore[attr-defined]


def _docs(cls: type) -> tuple[str | None, str | None]:
    """(summary, description): the docstring's first sentence and the whole of it (whitespace
    folded; no description when that is all), else the summary kept here."""
    if not cls.__doc__:
        return SUMMARIES.get(_tag(cls)), None
    text = " ".join(cls.__doc__.split())
    summary = re.split(r"(?<=[a-z)`\"][.!?])\s+(?=[A-Z`])", text, maxsplit=1)[0]
    return summary, (text if text != summary else None)


def _asyncapi_schema(node: Any) -> Any:
    """msgspec's JSON Schema with `discriminator` in AsyncAPI's form (the property name)."""
    if isinstance(node, list):
        return [_asyncapi_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _asyncapi_schema(v) for k, v in node.items()}
    if isinstance(out.get("discriminator"), dict):
        out["discriminator"] = out["discriminator"]["propertyName"]
    return out


def _message(cls: type) -> dict[str, Any]:
    message = {
        "name": _tag(cls),
        "title": cls.__name__,
        "payload": {"$ref": REF.format(name=cls.__name__)},
    }
    summary, description = _docs(cls)
    if summary:
        message["summary"] = summary
    if description:
        message["description"] = description
    return message


def build_spec() -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the protocol (plain JSON data)."""
    client = list(AnyClientMessage.__args__)  # type: ignore[attr-defined]
    server = list(AnyServerEvent.__args__)  # type: ignore[attr-defined]
    _, schemas = msgspec.json.schema_components(
        [AnyClientMessage, AnyServerEvent], ref_template=REF
    )
    messages = {_tag(cls): _message(cls) for cls in client + server}
    channel_messages = {name: {"$ref": f"#/components/messages/{name}"} for name in messages}

    def operation(action: str, types: list[type], summary: str) -> dict[str, Any]:
        refs = [{"$ref": f"#/channels/{CHANNEL}/messages/{_tag(cls)}"} for cls in types]
        return {
            "action": action,
            "channel": {"$ref": f"#/channels/{CHANNEL}"},
            "messages": refs,
            "summary": summary,
        }

    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "turnstream client protocol",
            "version": SPEC_VERSION,
            "description": DESCRIPTION,
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:8765",
                "pathname": "/",
                "protocol": "ws",
                "description": "A local dev edge (`python -m ws_edge`, TURNSTREAM_EDGE_PORT).",
                "security": [
                    {"$ref": "#/components/securitySchemes/bearer"},
                    {"$ref": "#/components/securitySchemes/queryToken"},
                ],
            }
        },
        "channels": {
            CHANNEL: {
                "address": "/",
                "title": "The edge's WebSocket",
                "description": AUTH,
                "messages": channel_messages,
                "bindings": {
                    "ws": {
                        "method": "GET",
                        "query": {
                            "type": "object",
                            "properties": {
                                "token": {
                                    "type": "string",
                                    "description": "The session token (when no header has one).",
                                }
                            },
                        },
                        "headers": {
                            "type": "object",
                            "properties": {
                                "Authorization": {
                                    "type": "string",
                                    "description": "`Bearer <token>` (any case): the token.",
                                }
                            },
                        },
                        "bindingVersion": "0.1.0",
                    }
                },
            }
        },
        "operations": {
            "receive": operation("receive", client, "What a client sends to the edge."),
            "send": operation("send", server, "What the edge sends to a client."),
        },
        "components": {
            "schemas": _asyncapi_schema(schemas),
            "messages": messages,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT (HS256)",
                    "description": "The handshake's `Authorization: Bearer` header.",
                },
                "queryToken": {
                    "type": "httpApiKey",
                    "name": "token",
                    "in": "query",
                    "description": "The token as the `token` query parameter.",
                },
            },
        },
    }


def render(spec: dict[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, a final newline."""
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def diff_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """Where two JSON documents differ: `+ path` added, `- path` removed, `~ path` changed."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(old.keys() | new.keys()):
            sub = f"{path}/{key}"
            if key not in old:
                out.append(f"+ {sub}")
            elif key not in new:
                out.append(f"- {sub}")
            else:
                out += diff_paths(old[key], new[key], sub)
        return out
    return [] if old == new else [f"~ {path or '/'}"]


def spec_cli(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    build: Callable[[], dict[str, Any]],
    path: Path,
    version: str,
    regenerate: str,
) -> int:
    """Print, `--write` or `--check` a generated document (this one, the HTTP API's)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {path.name}")
    mode.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--path", type=Path, default=path)
    args = parser.parse_args(argv)
    text = render(build())
    if args.write:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(text, encoding="utf-8")
        print(f"wrote {args.path} ({len(text.encode())} bytes, version {version})")
        return 0
    if args.check:
        committed = args.path.read_text(encoding="utf-8") if args.path.exists() else "{}"
        if committed == text:
            print(f"{args.path} is up to date (version {version})")
            return 0
        changes = diff_paths(json.loads(committed), json.loads(text)) or ["~ formatting"]
        print(f"{args.path} is stale ({len(changes)} differences); run {regenerate}")
        print("\n".join(changes[:40] + ([f"... {len(changes) - 40} more"] * (len(changes) > 40))))
        return 1
    sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return spec_cli(
        argv,
        prog="python -m infra.protocol_spec",
        description=__doc__.splitlines()[0],
        build=build_spec,
        path=SPEC_PATH,
        version=SPEC_VERSION,
        regenerate=REGENERATE,
    )


if __name__ == "__main__":
    sys.exit(main())

"""Dead letters of this namespace: list, read one, re-drive.

    python -m producers.deadletters list [--reason CODE] [--topic T] [--since 2h] [--until T]
    python -m producers.deadletters summary
    python -m producers.deadletters show 0/17
    python -m producers.deadletters redrive --reason invalid_row --since 1d [--dry-run]

`redrive` sends each selected letter's record back to its source topic, once: a letter a
committed re-drive already sent is skipped (and counted), so running it twice is safe.
The record goes to the topic, so every consumer group of that topic reads it again (the
consumers are idempotent by turn id). Exit 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

from producers.deadletters.box import read_all, redrive
from producers.deadletters.letters import DeadLetter, Selection, summary, to_redrive
from producers.times import TimeError, parse_time_ms
from runtime.settings import Settings
from schemas.ids import now_ms
from schemas.topics import DEAD_LETTERS


def selection_of(args: argparse.Namespace) -> Selection:
    now = now_ms()
    return Selection(
        codes=frozenset(args.reason or ()),
        topics=frozenset(args.topic or ()),
        since_ms=parse_time_ms(args.since, now) if args.since else 0,
        until_ms=parse_time_ms(args.until, now) if args.until else float("inf"),
        refs=frozenset(getattr(args, "refs", None) or ()),
    )


def line(letter: DeadLetter, done: bool) -> str:
    at = datetime.fromtimestamp(letter.timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    state = "redriven" if done else "waiting"
    reason = letter.reason.replace("\n", " ")[:80]
    return f"{letter.ref:>9}  {at}  {state:8}  {letter.source_topic}  {letter.code}  {reason}"


async def run(args: argparse.Namespace, settings: Settings) -> int:
    topic = DEAD_LETTERS.full_name(settings.namespace)
    letters = await read_all(settings.kafka_bootstrap, topic)
    if args.command == "summary":
        for (source, code), count in sorted(summary(letters).items()):
            print(f"{count:6}  {source}  {code}")
        return 0
    if args.command == "show":
        found = [x for x in letters if x.ref == args.ref and not x.is_marker]
        if not found:
            print(f"no dead letter {args.ref}", file=sys.stderr)
            return 2
        print(json.dumps(shown(found[0]), indent=1, ensure_ascii=False))
        return 0
    waiting, done = to_redrive(letters, selection_of(args), settings.namespace)
    if args.command == "list":
        for letter in sorted(waiting + done, key=lambda x: x.offset):
            print(line(letter, letter in done))
        print(f"({len(waiting)} waiting, {len(done)} already re-driven)")
        return 0
    nowhere = [x for x in waiting if not x.source_topic]  # no header says where it came from
    if nowhere:
        print(f"{len(nowhere)} letters name no source topic: left where they are", file=sys.stderr)
        waiting = [x for x in waiting if x.source_topic]
    if args.dry_run:
        print(f"would re-drive {len(waiting)} (already re-driven: {len(done)})")
        return 0
    sent = await redrive(
        settings.kafka_bootstrap, topic, waiting, f"deadletters-redrive-{settings.namespace}"
    )
    print(f"re-drove {sent} (already re-driven, skipped: {len(done)})")
    return 0


def shown(letter: DeadLetter) -> dict:
    """The letter's headers, and its value as JSON when it is JSON, else as text."""
    try:
        value: object = json.loads(letter.value)
    except ValueError:
        value = letter.value.decode(errors="replace")
    return {
        "ref": letter.ref,
        "at_ms": letter.timestamp_ms,
        "key": (letter.key or b"").decode(errors="replace"),
        "headers": letter.headers,
        "value": value,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m producers.deadletters")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("summary", help="counts by source topic and reason")
    show = commands.add_parser("show", help="one letter: headers and value")
    show.add_argument("ref", help="<partition>/<offset>, as `list` prints it")
    for name in ("list", "redrive"):
        command = commands.add_parser(name)
        command.add_argument("--reason", action="append", help="error code (repeatable)")
        command.add_argument("--topic", action="append", help="source topic (repeatable)")
        command.add_argument("--since", default="", help="2h, an ISO time or epoch ms")
        command.add_argument("--until", default="")
        if name == "redrive":
            command.add_argument("refs", nargs="*", help="only these letters")
            command.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run(args, Settings.from_env()))
    except TimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The eval set builder of the data flywheel: recorded turns and curated files → a versioned,
reproducible eval set (`schemas/flywheel.py` has the file formats).

    python -m flywheel.evalsets build --kind fix --since 7d --out evalsets/ \\
        [--name NAME] [--limit N] [--tenant T] [--until WHEN] [--version V] [--max-turns 20]

writes `<out>/<name>/<version>/manifest.json` + `items.jsonl` + `media/` (name: the kind by
default; version: `YYYYMMDD-HHMMSS-<first 8 hex of items.jsonl's sha256>`, built in a hidden
folder and renamed into place, so a set is never half-written nor overwritten). Kinds:

- `fix`: recent bad cases: thumbs_down, regenerate, stop or abandon feedback, input blocked,
  answer cut by the output check or flagged by the audit, error and timed-out finishes.
  `reason` says which; safety-only cases expect `any` (a person decides whether the screen
  was right), the others an answer.
- `golden`: `--from-file golden.jsonl` lines `{"text", "reference", "tags"?}` and/or liked
  turns (thumbs_up, no negative feedback, finished `stop`): their answer is the reference.
- `redteam`: the bundled red-team set (`--redteam-set v1`, `none` to leave it out; its
  attacks expect a refusal, its benign look-alikes an answer), more files in its format
  (`--from-file`), and recorded turns the input screen blocked (expect `refuse`).
- `multimodal`: turns with images or audio; their media is copied from the blob store into
  `media/` (raw pcm16 audio as WAV). A turn whose media expired is skipped and counted in the
  manifest's notes ("3 skipped: media expired").
- `regression`: `--from-file regressions.jsonl` lines `{"item_id", "text", "expect",
  "reference"?, "tags"?}` (no ClickHouse).

Recorded items carry the conversation's user turns up to and including the chosen one (read
from the `turn.submitted` events), its id as `item_id`, and provenance (turn, conversation,
tenant, time, reason, the query). `--since` (default 7d; or an ISO date) and `--until`
(default now) bound the turns' submission time; `--limit N` keeps at most N items (file
items first, then the newest recorded turns); `--no-clickhouse` builds golden and red-team
sets from files only. Same data and options → the same `items.jsonl` (same `items_sha256`);
duplicates (the same id, or the same conversation) and everything skipped are counted in
the manifest's `notes`. ClickHouse is reached as `python -m runtime.clickhouse.sql` reaches it
(a server, the running sink's HTTP interface, or the embedded engine); media come from the
blob store of `TURNSTREAM_NAMESPACE`.

Exit status: 0 built; 1 a bad input file (the message names file:line); 2 a usage error, or
ClickHouse or the blob store unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import re
import shutil
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import msgspec
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError
from redis.exceptions import RedisError

from flywheel.errors import FlywheelError
from flywheel.inputs import (
    REDTEAM_SOURCE,
    EvalSetError,
    bundled_redteam,
    golden_items,
    read_source,
    redteam_items,
    regression_items,
)
from flywheel.media import media_file
from flywheel.selection import (
    RUN_ID_SQL,
    Arranged,
    Draft,
    RecordedTurn,
    Skip,
    Window,
    arrange,
    assess,
    conversation,
    finish,
    history_sql,
    iso,
    notes_text,
    parse_when,
    selection_sql,
    version_name,
)
from runtime.blobs import blob_store
from runtime.clickhouse.client import DEFAULT_DATABASE, analyst_client, embedded_path
from runtime.clickhouse.sql import clickhouse_message
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import TurnSubmitted
from schemas.flywheel import EvalItem, EvalSetManifest, MediaItem, SetKind, write_jsonl

EXIT_BAD_INPUT = 1
EXIT_UNAVAILABLE = 2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
FILE_KINDS = {SetKind.GOLDEN, SetKind.REDTEAM, SetKind.REGRESSION}  # take --from-file
RECORDED_KINDS = {SetKind.GOLDEN, SetKind.FIX, SetKind.REDTEAM, SetKind.MULTIMODAL}
BLOB_FETCHES = 16  # blob gets in flight at once


class ServiceUnavailable(FlywheelError):
    """ClickHouse or the blob store did not answer (or refused the query)."""


@dataclass(frozen=True, slots=True)
class Options:
    kind: SetKind
    out: Path
    name: str
    window: Window
    files: tuple[Path, ...] = ()
    limit: int | None = None
    redteam_set: str = "v1"  # "" leaves the bundled set out
    version: str = ""
    database: str = DEFAULT_DATABASE
    max_turns: int = 20
    clickhouse: bool = True


@dataclass
class Collected:
    """Everything read for a set, before media are copied and items arranged."""

    file_items: list[EvalItem] = field(default_factory=list)
    drafts: list[Draft] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    unreadable: int = 0
    warnings: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Built:
    path: Path
    manifest: EvalSetManifest
    reused: bool = False  # the same items were built into this version already


# --- reading the sources ---------------------------------------------------------------------


def read_files(options: Options, collected: Collected) -> None:
    if options.kind is SetKind.REDTEAM and options.redteam_set:
        collected.file_items += bundled_redteam(options.redteam_set)
        collected.sources.append(f"file:{REDTEAM_SOURCE}/{options.redteam_set}")
    parse = {
        SetKind.GOLDEN: golden_items,
        SetKind.REGRESSION: regression_items,
        SetKind.REDTEAM: redteam_items,
    }
    for path in options.files:
        data = read_source(path)
        collected.file_items += parse[options.kind](data, path.as_posix())
        collected.sources.append(
            f"file:{path.as_posix()} sha256={hashlib.sha256(data).hexdigest()}"
        )


def _query(client: Client, sql: str, parameters: dict) -> list[Sequence]:
    try:
        return client.query(sql, parameters=parameters).result_rows
    except ClickHouseError as err:
        message = clickhouse_message(err)
        hint = " (migrations applied? python -m runtime.clickhouse.migrate)"
        known = "UNKNOWN_TABLE" in message or "does not exist" in message
        raise ServiceUnavailable(f"ClickHouse query failed: {message}{hint * known}") from err


def read_recorded(options: Options, client: Client, collected: Collected) -> None:
    """The selected turns and their conversations' submitted events → drafts."""
    window, limit = options.window, options.limit
    live_only = bool(_query(client, RUN_ID_SQL, {"database": options.database})[0][0])
    if not live_only:
        collected.warnings.append(
            "traces has no run_id (migration 0011 not applied): replayed turns not told apart"
        )
    sql = selection_sql(
        options.kind, options.database, limit=limit is not None, live_only=live_only
    )
    params = window.parameters(limit)
    rows = [RecordedTurn.from_row(r) for r in _query(client, sql, params)]
    collected.queries.append(f"{sql} -- {_describe(params)}")
    # what chose the turns, as items name it: the cap is the manifest's business, so a
    # limited build that took every turn gives the same items as an unlimited one
    chooser = selection_sql(options.kind, options.database, live_only=live_only)
    if not rows:
        return
    history = history_sql(options.database)
    history_params = {
        "tenants": sorted({r.tenant_id for r in rows}),
        "conversations": sorted({r.conversation_id for r in rows}),
        "until": window.until,
    }
    submitted: list[TurnSubmitted] = []
    for (payload,) in _query(client, history, history_params):
        try:
            event = decode(payload)
        except DecodeError:
            collected.unreadable += 1
            continue
        if isinstance(event, TurnSubmitted) and not getattr(event, "run_id", ""):
            submitted.append(event)  # a replayed turn is no part of the user's conversation
    collected.queries.append(
        f"{history} -- conversations={len(history_params['conversations'])}, "
        f"until={iso(window.until)}"
    )
    by_conversation: dict[tuple[str, str], list[TurnSubmitted]] = {}
    for event in submitted:
        by_conversation.setdefault((event.tenant_id, event.conversation_id), []).append(event)
    for row in rows:
        assessment = assess(options.kind, row)
        if isinstance(assessment, Skip):
            collected.skipped[assessment.reason] += 1
            continue
        events = by_conversation.get((row.tenant_id, row.conversation_id), [])
        turns = conversation(row, events, options.max_turns)
        if turns is None:
            collected.skipped["no turn.submitted event (events are kept 90 days)"] += 1
            continue
        collected.drafts.append(Draft(options.kind, row, turns, assessment, chooser))


def _describe(params: dict) -> str:
    return ", ".join(f"{k}={iso(v) if isinstance(v, datetime) else v!r}" for k, v in params.items())


def open_clickhouse(settings: Settings) -> Client:
    try:
        return analyst_client(settings)
    except Exception as err:  # any failure to open is "unreachable" to the user
        raise ServiceUnavailable(
            f"ClickHouse unreachable ({clickhouse_where(settings)}): {clickhouse_message(err)}"
        ) from err


def without_credentials(url: str) -> str:
    """A service URL fit for a manifest or a message: no user, password or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def clickhouse_where(settings: Settings) -> str:
    """Where the data came from."""
    if settings.clickhouse_url:
        return without_credentials(settings.clickhouse_url)
    return f"embedded engine at {embedded_path(settings)}"


# --- media -----------------------------------------------------------------------------------


async def fetch_blobs(settings: Settings, keys: Sequence[str]) -> dict[str, bytes | None]:
    """The recorded media bytes by sha256 (None: expired) from the configured store."""
    redis = redis_client(settings.redis_url)
    names = RedisNames.for_namespace(settings.namespace)
    gate = asyncio.Semaphore(BLOB_FETCHES)
    try:
        store = blob_store(settings.blob_store_url, redis, names)

        async def get(key: str) -> tuple[str, bytes | None]:
            async with gate:
                return key, await store.get(key)

        return dict(await asyncio.gather(*(get(k) for k in keys)))
    except (RedisError, OSError) as err:
        where = without_credentials(settings.blob_store_url or settings.redis_url)
        raise ServiceUnavailable(f"blob store unreachable ({where}): {err}") from err
    finally:
        await redis.aclose()


def copy_media(
    drafts: Sequence[Draft], blobs: dict[str, bytes | None]
) -> tuple[dict[str, MediaItem], dict[str, bytes], set[str]]:
    """The set's media files: items by recorded sha256, bytes by path, and the recorded
    keys whose bytes could not be stored (skipped as unreadable)."""
    items: dict[str, MediaItem] = {}
    files: dict[str, bytes] = {}
    bad: set[str] = set()
    for draft in drafts:
        for ref in draft.media_refs():
            data = blobs.get(ref.sha256)
            if data is None or ref.sha256 in items or ref.sha256 in bad:
                continue
            try:
                item, stored = media_file(ref, data)
            except ValueError:
                bad.add(ref.sha256)
                continue
            items[ref.sha256], files[item.path] = item, stored
    return items, files, bad


# --- the build -------------------------------------------------------------------------------


def build(options: Options, settings: Settings, now: datetime | None = None) -> Built:
    created = now or datetime.now(UTC)
    collected = Collected()
    read_files(options, collected)
    if options.clickhouse:
        client = open_clickhouse(settings)
        read_recorded(options, client, collected)
        collected.sources.append(f"clickhouse:{options.database} ({clickhouse_where(settings)})")
    keys = sorted({r.sha256 for d in collected.drafts for r in d.media_refs() if r.sha256})
    blobs = asyncio.run(fetch_blobs(settings, keys)) if keys else {}
    media, files, bad = copy_media(collected.drafts, blobs)
    recorded: list[EvalItem] = []
    for draft in collected.drafts:
        if any(r.sha256 in bad for r in draft.media_refs()):
            collected.skipped["media unreadable"] += 1
            continue
        item = finish(draft, media)
        if isinstance(item, Skip):
            collected.skipped[item.reason] += 1
        else:
            recorded.append(item)
    arranged = arrange(collected.file_items, recorded, options.limit)
    return write_set(options, collected, arranged, files, created)


def write_set(
    options: Options,
    collected: Collected,
    arranged: Arranged,
    files: dict[str, bytes],
    created: datetime,
) -> Built:
    """Write the set into a hidden folder, then rename it to its version: readers never see
    a half-written set, and an existing version is never replaced."""
    root = options.out / options.name
    root.mkdir(parents=True, exist_ok=True)
    building = root / f".building-{uuid.uuid4().hex[:8]}"
    (building / "media").mkdir(parents=True)
    try:
        for path in sorted({m.path for i in arranged.items for t in i.turns for m in t.media}):
            (building / path).write_bytes(files[path])
        digest = write_jsonl(building / "items.jsonl", arranged.items)
        version = options.version or version_name(created, digest)
        final = root / version
        earlier = same_items(root, digest, exclude=version)
        manifest = EvalSetManifest(
            name=options.name,
            version=version,
            kind=options.kind,
            created_at=iso(created),
            items=len(arranged.items),
            items_sha256=digest,
            queries=collected.queries,
            sources=collected.sources,
            notes=notes_text(
                collected.skipped,
                duplicates=arranged.duplicates,
                over_limit=arranged.over_limit,
                unreadable=collected.unreadable,
                same_as=earlier,
                warnings=collected.warnings,
            ),
        )
        if final.exists():
            existing = read_manifest(final)
            if not options.version and existing is not None and existing.items_sha256 == digest:
                return Built(final, existing, reused=True)  # built twice in the same second
            raise EvalSetError(f"{final} already exists; nothing was overwritten")
        (building / "manifest.json").write_bytes(
            msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"
        )
        building.rename(final)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return Built(final, manifest)


def read_manifest(folder: Path) -> EvalSetManifest | None:
    try:
        return msgspec.json.decode((folder / "manifest.json").read_bytes(), type=EvalSetManifest)
    except (OSError, msgspec.DecodeError):
        return None


def same_items(root: Path, digest: str, exclude: str = "") -> list[str]:
    """Earlier versions of the set with exactly these items."""
    return [
        folder.name
        for folder in sorted(root.iterdir())
        if folder.is_dir() and not folder.name.startswith(".") and folder.name != exclude
        if (m := read_manifest(folder)) is not None and m.items_sha256 == digest
    ]


# --- the command line ------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m flywheel.evalsets",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="build a new version of an eval set")
    b.add_argument("--kind", required=True, choices=[k.value for k in SetKind])
    b.add_argument("--out", required=True, type=Path, help="root folder of eval sets")
    b.add_argument("--name", default="", help="the set's name (default: the kind)")
    b.add_argument("--since", default="7d", help="7d, 12h, 30m, 2w or an ISO date (UTC)")
    b.add_argument("--until", default="", help="ISO date/time or duration ago (default: now)")
    b.add_argument("--tenant", default="", help="only this tenant's turns")
    b.add_argument("--limit", type=_positive, help="at most N items")
    b.add_argument(
        "--from-file",
        dest="files",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="golden, regression or red-team lines (repeatable)",
    )
    b.add_argument("--redteam-set", default="v1", help="bundled red-team set; none: leave out")
    b.add_argument("--version", default="", help="the version's name (default: time + hash)")
    b.add_argument("--database", default=DEFAULT_DATABASE)
    b.add_argument("--max-turns", type=_positive, default=20, help="conversation turns kept")
    b.add_argument("--no-clickhouse", action="store_true", help="files only (golden, redteam)")
    return top


def options_from(
    args: argparse.Namespace, now: datetime, usage: argparse.ArgumentParser
) -> Options:
    kind = SetKind(args.kind)
    name = args.name or kind.value
    for label, value in (("--name", name), ("--version", args.version)):
        if value and not _NAME.match(value):
            usage.error(f"{label} {value!r}: use letters, digits, '.', '_' and '-'")
    if args.files and kind not in FILE_KINDS:
        usage.error(f"--from-file does not apply to a {kind} set")
    if kind is SetKind.REGRESSION and not args.files:
        usage.error("a regression set is built from --from-file regressions.jsonl")
    use_clickhouse = kind in RECORDED_KINDS and not args.no_clickhouse
    if args.no_clickhouse and kind in {SetKind.FIX, SetKind.MULTIMODAL}:
        usage.error(f"a {kind} set is made of recorded turns: drop --no-clickhouse")
    redteam_set = "" if args.redteam_set == "none" else args.redteam_set
    if kind is SetKind.GOLDEN and not use_clickhouse and not args.files:
        usage.error("a golden set needs --from-file or ClickHouse (drop --no-clickhouse)")
    try:
        since = parse_when(args.since, now)
        until = parse_when(args.until, now) if args.until else now
    except ValueError as err:
        usage.error(str(err))
    if since >= until:
        usage.error(f"--since {args.since} is not before --until ({iso(until)})")
    return Options(
        kind=kind,
        out=args.out,
        name=name,
        window=Window(since, until, args.tenant),
        files=tuple(args.files),
        limit=args.limit,
        redteam_set=redteam_set,
        version=args.version,
        database=args.database,
        max_turns=args.max_turns,
        clickhouse=use_clickhouse,
    )


def main(argv: Sequence[str] | None = None) -> int:
    # the client logs a failed connection itself; the message below says it once, clearly
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
    usage = parser()
    args = usage.parse_args(argv)
    now = datetime.now(UTC)
    options = options_from(args, now, usage)
    try:
        built = build(options, Settings.from_env(), now)
    except EvalSetError as err:
        print(f"evalsets: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServiceUnavailable as err:
        print(f"evalsets: {err}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    m = built.manifest
    state = "unchanged (already built)" if built.reused else "wrote"
    print(f"{state} {built.path}: {m.items} items, items_sha256 {m.items_sha256[:12]}")
    if m.notes:
        print(f"  notes: {m.notes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tool scenario: users whose questions call the deployment's key-value store (an MCP
server with side effects, run by the tools worker) while the tools worker is killed -9 in
the middle of a call, a question is sent again, a user stops a turn while its call runs,
and every request is delivered to the tools worker a second time. Then the side effects
are counted against the calls (`tool_books`).

The key-value server answers every write a while after making it (`--linger-s`), so the
kill falls between an effect and its record: the hardest case, where only the books stand
between a redelivery and a second write.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from bench.faults.load import TENANT
from bench.faults.stack import FaultStack
from bench.faults.tool_books import SideEffectBooks
from harness.kafka import records_so_far
from schemas.channels import RedisNames
from schemas.topics import TOOLS_REQUESTED
from workers.tools.book_rules import BookState, decode_entry
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient
from ws_edge.messages import FunctionName, McpTool, NamedToolChoice, ResponseDone

Progress = Callable[[str], None]
LINGER_S = 1.0  # every write is answered this long after it is made
PUT = dict(
    tools=[McpTool(server_label="kv")],
    tool_choice=NamedToolChoice(function=FunctionName(name="kv__put")),
)


def tool_env(kv_url: str) -> dict[str, str]:
    """The roles' settings for the scenario: the key-value server, the load's tenant allowed."""
    return {
        "TURNSTREAM_MCP_SERVERS": json.dumps([{"name": "kv", "url": kv_url}]),
        "TURNSTREAM_TOOL_ALLOW": f"{TENANT}=kv__*",
        "TURNSTREAM_TOOL_TIMEOUT_S": "2",
        "TURNSTREAM_TOOL_CATALOG_EVERY_S": "1",
    }


def effects(books: Path) -> list[str]:
    return [json.loads(line)["idempotency"] for line in books.read_text().splitlines()]


async def run_tool_scenario(
    stack: FaultStack,
    env: dict[str, str],
    books_path: Path,
    *,
    users: int = 3,
    questions_per_user: int = 4,
    progress: Progress = print,
) -> SideEffectBooks:
    redis = Redis.from_url(env["TURNSTREAM_REDIS_URL"])
    names = RedisNames.for_namespace(env.get("TURNSTREAM_NAMESPACE", ""))
    books = SideEffectBooks()
    calls: dict[str, str] = {}  # idempotency key (call id) → the turn it answers
    finished: list[ResponseDone] = []
    url = stack.edge_urls()[0]
    secret = env.get("TURNSTREAM_AUTH_SECRET") or _dev_secret()

    async def user(i: int) -> None:
        token = mint_token(secret, f"tools-{i}", TENANT)
        async with EdgeClient.connect(url, token) as client:
            conversation = f"c-tools-{i}-{uuid.uuid4().hex[:6]}"
            for q in range(questions_per_user):
                books.questions += 1
                text = f"tools {i} question {q}: remember this"
                client_turn_id = f"tools-{i}-{q}-{uuid.uuid4().hex[:6]}"
                stop = i == 0 and q == 1  # this one, the user stops while its call runs
                answers = await _ask(
                    client, conversation, text, client_turn_id, stop=stop, books=books
                )
                for done in answers:
                    for call in done.tool_calls:
                        calls[call.call_id] = done.turn_id
                if answers and not answers[-1].continued_by:
                    books.answered += 1
                    finished.append(answers[0])
                if i == 1 and q == 0:  # sent again (a retry, a regenerate of the same turn)
                    again = await client.ask(
                        conversation, text, client_turn_id=client_turn_id, **PUT
                    )
                    assert again.turn_id == answers[0].turn_id, "a second turn"
                    books.regenerated += 1

    load = [asyncio.create_task(user(i)) for i in range(users)]
    try:
        victim = await _kill_mid_call(stack, redis, names, books_path, progress)
        books.struck += victim
        await asyncio.wait_for(asyncio.gather(*load), timeout=240)
    finally:
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
    books.redelivered = await _redeliver(env, finished)
    await asyncio.sleep(LINGER_S + 4)  # the redeliveries ran (replayed from the books)
    books.calls = len(calls)
    for key in effects(books_path):
        books.effects[key] += 1
    for key in calls:
        entry = decode_entry(await redis.get(names.tool_book_key(key)))
        books.outcomes[key] = entry.outcome if entry is not None else ""
        books.effects.setdefault(key, 0)
    await redis.aclose()
    progress(books.line())
    return books


async def _ask(
    client: EdgeClient,
    conversation: str,
    text: str,
    client_turn_id: str,
    *,
    stop: bool,
    books: SideEffectBooks,
) -> list[ResponseDone]:
    """The question's answers, through its tool rounds; `stop`: cancel the continuation as
    soon as it is named (its call is still running: the server lingers before answering)."""
    turn_id = await client.start_turn(conversation, text, client_turn_id=client_turn_id, **PUT)
    answers: list[ResponseDone] = []
    while True:
        async for event in client.events(turn_id, wait_s=120):
            if isinstance(event, ResponseDone):
                answers.append(event)
        if not answers[-1].continued_by:
            return answers
        turn_id = answers[-1].continued_by
        if stop:
            await client.cancel(turn_id)
            books.stopped += 1
            stop = False


async def _kill_mid_call(
    stack: FaultStack, redis: Redis, names: RedisNames, books_path: Path, progress: Progress
) -> list[str]:
    """kill -9 the tools worker once a write is made and its result not yet recorded; start
    it again. What it hit, in words."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        written = effects(books_path)
        if written:
            entry = decode_entry(await redis.get(names.tool_book_key(written[-1])))
            if entry is not None and entry.state == BookState.CLAIMED:
                await asyncio.to_thread(stack.kill, "tools")
                progress(f"  killed the tools worker mid-call ({written[-1]})")
                took = await asyncio.to_thread(stack.restart, "tools")
                progress(f"  tools worker back in {took:.0f} s")
                return [f"call {written[-1]} made its effect, not its record"]
        await asyncio.sleep(0.05)
    return []


async def _redeliver(env: dict[str, str], finished: list[ResponseDone]) -> int:
    """Every request of the finished questions, delivered to the tools worker again (as a
    consumer group reset would)."""
    topic = TOOLS_REQUESTED.full_name(env.get("TURNSTREAM_NAMESPACE", ""))
    wanted = {d.turn_id.encode() for d in finished}
    records = await records_so_far(
        env["TURNSTREAM_KAFKA_BOOTSTRAP"], topic, lambda r: any(t in r.value for t in wanted)
    )
    producer = AIOKafkaProducer(bootstrap_servers=env["TURNSTREAM_KAFKA_BOOTSTRAP"])
    await producer.start()
    try:
        for record in records:
            await producer.send_and_wait(topic, record.value, record.key)
    finally:
        await producer.stop()
    return len(records)


def _dev_secret() -> str:
    from runtime.settings import DEV_AUTH_SECRET

    return DEV_AUTH_SECRET

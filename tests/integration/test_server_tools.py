"""The deployment's tools end to end: a WebSocket client asks for an MCP server's tools, the
model's call runs on the tools worker against a real MCP server (the key-value store with
books of its writes; the calculator over stdio), and the answer continues with the result
on the same connection. Then the side-effect books under a redelivery, a retried turn, a
worker that dies mid-call and a user who stops the turn.

The engine is the fake one (its "call" is an instance of the tool's schema, as guided
decoding would force); the real engines' guided calls are tested in test_vllm.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from harness.kafka import records_so_far
from harness.polling import eventually
from harness.stack import pipeline
from runtime.kafka_topics import ensure_topics
from runtime.processes import REPO
from runtime.settings import Settings, settings_env
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.events import (
    FinishReason,
    TurnCancelled,
    TurnCompleted,
    TurnSubmitted,
)
from schemas.ids import now_ms
from schemas.tools import AllowList
from schemas.topics import TOOLS_REQUESTED, TURNS_SUBMITTED
from workers.inference.engines.fake_engine import FakeEngine
from workers.tools.book_rules import UNKNOWN, BookState, decode_entry
from workers.tools.books import ToolBooks
from workers.tools.mcp_servers import McpServers
from workers.tools.servers import ServerSpec
from workers.tools.service import CANCELLED, STOPPED, ToolsConfig, ToolsService
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import FunctionName, McpTool, NamedToolChoice

pytestmark = pytest.mark.integration


def put_choice(tool: str = "kv__put") -> NamedToolChoice:
    return NamedToolChoice(function=FunctionName(name=tool))


def writes(books) -> list[dict]:
    return [json.loads(line) for line in books.read_text().splitlines()]


@pytest.fixture
async def tools_pipeline(services: Settings, session_namespace: str, kv_server):
    url, books = kv_server
    settings = Settings.from_env(
        namespace=f"{session_namespace}-tools",
        edge_port=0,
        tool_allow="acme=kv__*,calc__*;globex=calc__add",
        tool_timeout_s=5.0,
        tool_catalog_every_s=0.5,
    )
    servers = McpServers(
        [
            ServerSpec("kv", url=url),
            ServerSpec("calc", ("python", "-m", "harness.mcp_servers.calculator")),
        ],
        allow=AllowList.parse(settings.tool_allow),
        timeout_s=settings.tool_timeout_s,
    )
    await servers.start()
    try:
        async with pipeline(settings, FakeEngine(token_interval_s=0.002), tools=servers) as running:
            await eventually(lambda: len(running.edge.server_tools.listed) >= 7, timeout_s=20)
            yield running, books
    finally:
        await servers.close()


async def test_a_server_tool_runs_once_and_the_answer_continues_with_its_result(tools_pipeline):
    running, books = tools_pipeline
    async with EdgeClient.connect(running.url, running.token("ann")) as client:
        answers = await client.ask_through_tools(
            "conv-tools-1",
            "remember this",
            tools=[McpTool(server_label="kv")],
            tool_choice=put_choice(),
        )
        asked, answered = answers
        assert asked.finish_reason == FinishReason.TOOL_CALLS and asked.continued_by
        [call] = asked.tool_calls
        assert call.name == "kv__put"
        assert answered.turn_id == asked.continued_by
        assert answered.finish_reason == FinishReason.STOP and not answered.tool_calls
        # the fake engine echoes the last user message: here, the tool's result
        assert "<tool_response>" in answered.text and "stored" in answered.text
        [write] = writes(books)
        assert write["idempotency"] == call.call_id
        # the calculator over stdio, in the same conversation (the continuation is in the
        # history, so a second question goes on from it)
        add = await client.ask_through_tools(
            "conv-tools-1",
            "add",
            tools=[McpTool(server_label="calc", allowed_tools=["add"])],
            tool_choice=put_choice("calc__add"),
        )
        assert [a.finish_reason for a in add] == [FinishReason.TOOL_CALLS, FinishReason.STOP]
        assert "0.0" in add[-1].text


async def test_only_the_tools_a_tenant_is_allowed_are_offered(tools_pipeline):
    running, _ = tools_pipeline
    async with EdgeClient.connect(running.url, running.token("gil", tenant="globex")) as client:
        with pytest.raises(TurnRejected) as refused:
            await client.start_turn("conv-tools-2", "hi", tools=[McpTool(server_label="kv")])
        assert refused.value.error.code == "invalid_tools" and "'kv'" in refused.value.error.message
        with pytest.raises(TurnRejected) as refused:
            await client.start_turn(
                "conv-tools-2",
                "hi",
                tools=[McpTool(server_label="calc", allowed_tools=["divide"])],
            )
        assert "divide" in refused.value.error.message
        answers = await client.ask_through_tools(
            "conv-tools-2",
            "add",
            tools=[McpTool(server_label="calc")],
            tool_choice=put_choice("calc__add"),
        )
        assert answers[-1].finish_reason == FinishReason.STOP


async def test_a_redelivered_request_and_a_retried_turn_run_nothing_twice(tools_pipeline):
    running, books = tools_pipeline
    settings = running.settings
    async with EdgeClient.connect(running.url, running.token("ann")) as client:
        options = dict(tools=[McpTool(server_label="kv")], tool_choice=put_choice())
        first = await client.ask_through_tools(
            "conv-tools-3", "once", client_turn_id="t-3", **options
        )
        # the same turn again (a client retry after a lost connection): the answer is
        # replayed, the call is not made again
        again = await client.ask("conv-tools-3", "once", client_turn_id="t-3", **options)
        assert again.turn_id == first[0].turn_id and again.tool_calls == first[0].tool_calls
    # Kafka delivers the request to the tools worker a second time
    names = RedisNames.for_namespace(settings.namespace)
    recorded = await running.edge.redis.get(names.done_key(first[0].turn_id))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            TOOLS_REQUESTED.full_name(settings.namespace), recorded, b"conv-tools-3"
        )
    finally:
        await producer.stop()
    continuation = first[0].continued_by

    async def continuations() -> list[TurnSubmitted]:
        return await _continuations(settings, continuation)

    await eventually(lambda: _count(continuations, 2), timeout_s=30)
    submitted = await continuations()
    runs = [t.tool_results[0].run for t in submitted]
    assert [r.replayed for r in runs] == [False, True]
    assert submitted[0].tool_results[0].output == submitted[1].tool_results[0].output
    matching = [w for w in writes(books) if w["idempotency"] == first[0].tool_calls[0].call_id]
    assert len(matching) == 1  # the side effect, once


async def _count(read, n: int) -> bool:
    return len(await read()) >= n


# ---- the worker's books, driven directly (a worker dying mid-call, a user stopping) ----------
def _request(
    settings: Settings, turn_id: str, arguments: dict, *, tool: str = "kv__put"
) -> TurnCompleted:
    from schemas.events import Timings, ToolCall, ToolSpec, Usage
    from schemas.tools import call_id, continuation

    tools = [ToolSpec("kv__put", server="kv"), ToolSpec("kv__get", server="kv", read_only=True)]
    turn = TurnSubmitted(
        turn_id=turn_id,
        conversation_id=f"conv-{turn_id}",
        tenant_id="acme",
        user_id="ann",
        edge_id="nobody",
        text="x",
        submitted_at_ms=now_ms(),
        tools=tools,
    )
    return TurnCompleted(
        turn_id=turn_id,
        conversation_id=turn.conversation_id,
        tenant_id="acme",
        user_id="ann",
        finish_reason=FinishReason.TOOL_CALLS,
        text="",
        usage=Usage(1, 1),
        timings=Timings(0, 0, 0),
        model="fake",
        worker_id="w",
        completed_at_ms=now_ms(),
        tool_calls=[ToolCall(call_id(turn_id, 0), tool, json.dumps(arguments))],
        continuation=continuation(turn),
    )


@pytest.fixture
async def direct_worker(services: Settings, session_namespace: str, kv_server):
    """A tools worker's service without its consumer (the test hands it requests), on the
    real Redis, Kafka and kv server; a second one stands for the worker a redelivery meets."""
    url, books = kv_server
    settings = Settings.from_env(namespace=f"{session_namespace}-toolbooks")
    await ensure_topics(
        settings.kafka_bootstrap,
        settings.namespace,
        replication_factor=settings.kafka_replication_factor,
    )
    servers = McpServers(
        [ServerSpec("kv", url=url)], allow=AllowList.parse("*=kv__*"), timeout_s=2.0
    )
    await servers.start()
    from runtime.redis import redis_client

    redis = redis_client(settings.redis_url)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    names = RedisNames.for_namespace(settings.namespace)

    def worker(worker_id: str) -> ToolsService:
        return ToolsService(
            servers=servers,
            books=ToolBooks(redis, names),
            redis=redis,
            producer=producer,
            names=names,
            config=ToolsConfig(
                worker_id=worker_id,
                submitted_topic=TURNS_SUBMITTED.full_name(settings.namespace),
                timeout_s=2.0,
                grace_s=0.5,
            ),
            clock_ms=now_ms,
        )

    try:
        yield settings, worker, books, redis, names
    finally:
        await producer.stop()
        await redis.aclose()
        await servers.close()


async def _continuations(settings: Settings, continuation_id: str) -> list[TurnSubmitted]:
    """The turns the tools worker submitted under this id (one per request it handled)."""
    found = await records_so_far(
        settings.kafka_bootstrap,
        TURNS_SUBMITTED.full_name(settings.namespace),
        lambda r: continuation_id.encode() in r.value,
    )
    return [e for e in (decode(r.value) for r in found) if isinstance(e, TurnSubmitted)]


async def _results_of(settings: Settings, continuation_id: str) -> list:
    return [t.tool_results[0] for t in await _continuations(settings, continuation_id)]


# a tools worker that handles one request it reads from a file, then idles (killed by the test)
_ONE_REQUEST = """
import asyncio, sys
from pathlib import Path
from runtime.redis import redis_client
from runtime.processes import REPO
from runtime.settings import Settings, settings_env
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.ids import now_ms
from schemas.tools import AllowList
from workers.tools.books import ToolBooks
from workers.tools.mcp_servers import McpServers
from workers.tools.servers import ServerSpec
from workers.tools.service import ToolsConfig, ToolsService

async def main():
    settings = Settings.from_env()
    names = RedisNames.for_namespace(settings.namespace)
    servers = McpServers([ServerSpec("kv", url=sys.argv[1])], allow=AllowList.parse("*=kv__*"))
    await servers.start()
    redis = redis_client(settings.redis_url)
    config = ToolsConfig(worker_id="doomed", submitted_topic="unused", timeout_s=2.0, grace_s=0.5)
    service = ToolsService(servers, ToolBooks(redis, names), redis, None, names, config, now_ms)
    await service.handle(decode(Path(sys.argv[2]).read_bytes()))

asyncio.run(main())
"""


async def test_a_worker_killed_mid_call_leaves_one_side_effect_and_an_unknown_outcome(
    direct_worker, kv_server, tmp_path
):
    settings, worker, books, redis, names = direct_worker
    # the server writes at once, then answers after a second: the kill falls between
    request = _request(settings, "died-1", {"key": "k1", "value": "v", "linger_s": 1.0})
    path = tmp_path / "request.bin"
    path.write_bytes(encode(request))
    env = {**os.environ, **settings_env(settings)}
    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ONE_REQUEST, kv_server[0], str(path), env=env, cwd=REPO
    )
    try:
        book = names.tool_book_key(request.tool_calls[0].call_id)
        await eventually(lambda: redis.exists(book), timeout_s=30)  # claimed: the call runs
        await eventually(lambda: len(writes(books)) == 1, timeout_s=10)  # the effect is done
        doomed.send_signal(signal.SIGKILL)  # before its answer: no result recorded
        await doomed.wait()
        await worker("w2").handle(request)  # the redelivery, on another worker
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
    [result] = await _results_of(settings, request.continued_by)
    assert result.run.outcome == UNKNOWN and "unknown" in result.output
    assert len(writes(books)) == 1  # never run a second time
    # a read-only call left the same way simply runs again
    read = _request(settings, "died-2", {"key": "k1"}, tool="kv__get")
    key = names.tool_book_key(read.tool_calls[0].call_id)
    await redis.set(key, b'{"state":"claimed","worker":"w1","claimed_at_ms":0,"deadline_ms":1}')
    await worker("w2").handle(read)
    [result] = await _results_of(settings, read.continued_by)
    assert result.run.outcome == "ok" and result.output == "v"


async def test_a_stopped_turn_runs_no_call_and_a_running_one_is_cut_short(direct_worker):
    settings, worker, books, redis, names = direct_worker
    stopped = _request(settings, "stopped-1", {"key": "k2", "value": "v"})
    await redis.set(names.cancelled_key(stopped.continued_by), "1", ex=60)
    await worker("w1").handle(stopped)
    [result] = await _results_of(settings, stopped.continued_by)
    assert result.run.outcome == CANCELLED and writes(books) == []
    await worker("w1").handle(stopped)  # redelivered: still not run, the books say so
    assert writes(books) == []
    # a barge-in while the call runs: it is cut short and recorded as such
    running = _request(settings, "stopped-2", {"key": "k3", "value": "v", "delay_s": 1.5})
    service = worker("w1")
    listener = asyncio.create_task(service.listen_for_cancels())

    async def subscribed() -> bool:
        [(_, listeners)] = await redis.pubsub_numsub(names.control_channel())
        return listeners > 0

    await eventually(subscribed, timeout_s=10)
    task = asyncio.create_task(service.handle(running))
    await eventually(lambda: running.continued_by in service._running, timeout_s=10)
    await redis.publish(
        names.control_channel(),
        encode(TurnCancelled(turn_id=running.continued_by, conversation_id="c", reason="barge_in")),
    )
    await task
    listener.cancel()
    [result] = await _results_of(settings, running.continued_by)
    assert result.run.outcome == STOPPED
    entry = decode_entry(await redis.get(names.tool_book_key(running.tool_calls[0].call_id)))
    assert entry is not None and entry.state == BookState.DONE and entry.outcome == STOPPED
    await asyncio.sleep(2.0)  # past the call's delay: did the server finish the write anyway?
    # MCP cancels the request on the server too: the write never happened
    assert [w for w in writes(books) if w["key"] == "k3"] == []
    assert msgspec.json.decode(msgspec.json.encode(result.run))["outcome"] == STOPPED


async def test_a_guessed_voice_turns_side_effects_wait_for_its_confirmation(direct_worker):
    """A voice turn started on a guess that the user finished: its write runs once the guess
    is confirmed, never when it is withdrawn (and a withdrawn guess is not continued); a
    read-only call does not wait."""
    settings, worker, books, redis, names = direct_worker

    def guess(turn_id: str, arguments: dict, tool: str = "kv__put") -> TurnCompleted:
        request = _request(settings, turn_id, arguments, tool=tool)
        return msgspec.structs.replace(
            request,
            continuation=msgspec.structs.replace(request.continuation, speculative=True),
        )

    withdrawn = guess("guess-1", {"key": "g1", "value": "v"})
    await redis.set(names.cancelled_key("guess-1"), "1", ex=60)  # the user went on talking
    await worker("w1").handle(withdrawn)
    assert writes(books) == [] and await _results_of(settings, withdrawn.continued_by) == []
    confirmed = guess("guess-2", {"key": "g2", "value": "v"})
    service = worker("w1")
    task = asyncio.create_task(service.handle(confirmed))
    await asyncio.sleep(0.5)
    assert writes(books) == []  # waiting for the verdict on the guess
    await redis.set(names.confirmed_key("guess-2"), "1", ex=60)
    await task
    assert [w["key"] for w in writes(books)] == ["g2"]
    [result] = await _results_of(settings, confirmed.continued_by)
    assert result.run.outcome == "ok"
    [submitted] = await _continuations(settings, confirmed.continued_by)
    assert not submitted.speculative  # it follows a confirmed answer
    read = guess("guess-3", {"key": "g2"}, tool="kv__get")
    await redis.set(names.confirmed_key("guess-3"), "1", ex=60)
    await worker("w1").handle(read)
    [result] = await _results_of(settings, read.continued_by)
    assert result.output == "v"


async def test_the_terminal_chat_follows_an_answer_through_its_tool_call(tools_pipeline, capsys):
    """`/tools calc` in `python -m infra.chat`: the question is answered by a calculator
    call, shown, and the answer goes on from its result."""
    from infra.chat import answer, tools_command

    running, _ = tools_pipeline
    async with EdgeClient.connect(running.url, running.token("ann")) as client:
        tools = tools_command("/tools calc")
        await client.update_session(tools=tools, tool_choice="required")
        await answer(client, "conv-chat-1", "What is 17 plus 25?")
    shown = capsys.readouterr().out
    assert "(called calc__" in shown and "[tool_calls]" in shown
    assert "<tool_response>" in shown  # the fake engine echoes the result it was given
    assert tools_command("/tools off") == [] and tools_command("hello") is None

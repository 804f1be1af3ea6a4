"""An answer's calls as its outcome records them: calls of the deployment's tools carry
the turn that will return their results (the tools worker's request), client calls do not,
and the outcome recorder asks the tools worker before it records the answer."""

from __future__ import annotations

import asyncio

from harness.factories import completed, submitted
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.events import FinishReason, ToolChoice, ToolChoiceMode, ToolSpec
from schemas.tools import continuation_id
from workers.inference.service import with_tool_calls
from workers.runtime.outcome import OutcomeRecorder

PUT = ToolSpec("kv__put", server="kv")
WEATHER = ToolSpec("get_weather")
CALL = '<tool_call>{"name": "kv__put", "arguments": {"key": "a"}}</tool_call>'


def test_calls_of_the_deployments_tools_carry_their_continuation():
    turn = submitted("t-1", tools=[PUT, ToolSpec("kv__get", server="kv")])
    ended = with_tool_calls(completed("t-1", text=CALL), turn)
    assert ended.finish_reason == FinishReason.TOOL_CALLS
    assert ended.continuation is not None and ended.continued_by == continuation_id("t-1")
    assert ended.continuation.tools == turn.tools and ended.continuation.text == ""


def test_client_calls_a_cut_answer_and_a_plain_one_carry_none():
    client = submitted("t-2", tools=[WEATHER])
    asked = with_tool_calls(completed("t-2", text=CALL.replace("kv__put", "get_weather")), client)
    assert asked.finish_reason == FinishReason.TOOL_CALLS and asked.continuation is None
    served = submitted("t-3", tools=[PUT], tool_choice=ToolChoice(ToolChoiceMode.AUTO))
    cut = with_tool_calls(completed("t-3", text=CALL, finish_reason=FinishReason.CANCELLED), served)
    assert cut.tool_calls and cut.continuation is None  # stopped: the tools do not run
    plain = with_tool_calls(completed("t-3", text="No call."), served)
    assert plain.continuation is None and plain.continued_by == ""


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def send_and_wait(self, topic, value, key):
        self.sent.append((topic, value))


class _Redis:
    """The recorder's Redis, as far as a first recording uses it."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def pipeline(self, transaction=False):
        return _Pipeline(self)

    async def set(self, key, value, **_):
        self.values[key] = value

    async def delete(self, key):
        self.values.pop(key, None)


class _Pipeline:
    def __init__(self, redis: _Redis) -> None:
        self.redis, self.ops = redis, []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def set(self, key, value, nx=False, get=False, **_):
        self.ops.append(("set", key, value, nx, get))

    def get(self, key):
        self.ops.append(("get", key))

    def delete(self, key):
        self.ops.append(("delete", key))

    async def execute(self):
        out = []
        for op in self.ops:
            if op[0] == "set":
                _, key, value, nx, get = op
                before = self.redis.values.get(key)
                if not (nx and before is not None):
                    self.redis.values[key] = value
                out.append(before if get else True)
            elif op[0] == "get":
                out.append(self.redis.values.get(op[1]))
            else:
                self.redis.values.pop(op[1], None)
                out.append(1)
        return out


class _Relay:
    async def publish_confirmed(self, channel, event):
        pass


def test_the_tools_worker_is_asked_before_the_answer_is_recorded():
    producer = _Producer()
    recorder = OutcomeRecorder(
        redis=_Redis(),
        producer=producer,
        relay=_Relay(),
        names=RedisNames.for_namespace("t"),
        completed_topic="turns.completed",
        tools_topic="tools.requested",
    )
    ended = with_tool_calls(completed("t-1", text=CALL), submitted("t-1", tools=[PUT]))
    asyncio.run(recorder.record(ended, "edge-1"))
    assert [topic for topic, _ in producer.sent] == ["tools.requested", "turns.completed"]
    assert decode(producer.sent[0][1]) == ended  # the decided bytes, both times
    producer.sent.clear()
    plain = completed("t-2")
    asyncio.run(recorder.record(plain, "edge-1"))
    assert [topic for topic, _ in producer.sent] == ["turns.completed"]

"""The tools worker: runs the deployment's (MCP) tool calls an answer made, each exactly
once, then submits the turn that returns their results.

Per `turn.completed` from `tools.requested` (its `continuation` is the next turn, decided
with the answer, so every retry asks for the same calls): each call is looked up in the
books (`books`, `book_rules`) — run if this worker claimed it, replayed if it ran before,
waited for if another worker runs it, reported unknown if a dead worker's side effect
may or may not have happened. A call of a turn the user stopped (the continuation's cancel
marker, or a cancel on the control channel while it runs) is not run, or is cut short, and
recorded so. Then the continuation is published to `turns.submitted`; the rest of the
pipeline answers it like any turn (the edge follows it from the answer's `continued_by`).

A redelivered request finds every call in the books and publishes the same continuation
again; the assembly job and the inference worker already take a turn twice as once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolResult,
    ToolRun,
    ToolSpec,
    TurnCancelled,
    TurnCompleted,
    TurnSubmitted,
)
from schemas.tools import idempotency_key
from workers.runtime.control import control_events
from workers.tools.book_rules import UNKNOWN, UNKNOWN_TEXT, BookEntry, BookState, Step, next_step
from workers.tools.books import ToolBooks
from workers.tools.errors import ToolsError
from workers.tools.mcp_servers import McpServers

log = logging.getLogger("turnstream.tools")
CANCELLED = "cancelled"  # not run: the turn was stopped before the call
STOPPED = "stopped"  # cut short while it ran: it may have taken effect
CANCELLED_TEXT = "Not run: the user stopped the turn before this call."
CUT_SHORT_TEXT = "Stopped: the user stopped the turn while this call ran; it may have taken effect."
UNCONFIRMED_TEXT = (
    "Not run: the turn was started on a guess that the user had finished speaking, and the "
    "guess was not confirmed."
)
CONFIRM_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    worker_id: str
    submitted_topic: str
    timeout_s: float = 10.0
    grace_s: float = 5.0  # past a claim's timeout, before it counts as dead
    max_rounds: int = 4  # tool rounds per user turn; the last continuation may call none
    confirm_wait_s: float = 20.0  # a guessed voice turn's side effects wait this long for it


@dataclass
class ToolsService:
    servers: McpServers
    books: ToolBooks
    redis: Redis
    producer: AIOKafkaProducer
    names: RedisNames
    config: ToolsConfig
    clock_ms: Callable[[], float]
    held: int = 0
    _running: dict[str, set[asyncio.Task]] = field(default_factory=dict)

    async def handle(self, event: AnyEvent) -> None:
        if not isinstance(event, TurnCompleted) or event.continuation is None:
            log.warning("ignoring %s on the tools topic", type(event).__name__)
            return
        self.held += 1
        # a voice turn started on a guess: the verdict on it, asked once for all its calls
        verdict = (
            asyncio.ensure_future(self._confirmed(event))
            if event.continuation.speculative
            else None
        )
        try:
            results = [await self._result_of(event, call, verdict) for call in event.tool_calls]
            if verdict is not None and not await verdict:
                # a withdrawn guess: nobody follows it (its side effects ran none)
                log.info("turn %s was a withdrawn guess: not continued", event.turn_id)
                return
            await self._continue(event.continuation, results)
        finally:
            if verdict is not None and not verdict.done():
                verdict.cancel()
            self.held -= 1

    async def fail_turn(self, event: AnyEvent, reason: str) -> None:
        """Last resort when handling failed unexpectedly: the conversation goes on with the
        calls' failure as their results, instead of its client waiting for ever."""
        if not isinstance(event, TurnCompleted) or event.continuation is None:
            return
        results = [
            _result(call, f"The tool call failed: {reason}"[:500], "internal_error")
            for call in event.tool_calls
        ]
        await self._continue(event.continuation, results)

    def request_cancel(self, turn_id: str) -> None:
        for task in self._running.get(turn_id, ()):
            task.cancel()

    async def listen_for_cancels(self) -> None:
        """Stop the running calls of a continuation its user cancelled (barge-in, stop)."""
        while True:
            try:
                async for event in control_events(self.redis, self.names.control_channel()):
                    if isinstance(event, TurnCancelled):
                        self.request_cancel(event.turn_id)
            except RedisError:
                log.warning("control channel lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)

    # ---- one call ---------------------------------------------------------------------------
    async def _result_of(
        self, answer: TurnCompleted, call: ToolCall, verdict: asyncio.Future[bool] | None
    ) -> ToolResult:
        assert answer.continuation is not None
        turn = answer.continuation
        key = idempotency_key(call)
        spec = next((t for t in turn.tools if t.name == call.name), None)
        read_only = spec is not None and spec.read_only
        # a voice turn started on a guess: its side effects wait until the user is known to
        # have finished (read-only calls run at once: nothing to undo)
        unconfirmed = verdict is not None and not read_only and not await verdict
        mine = self._claim()
        found, seen = await self.books.claim(key, mine)
        while True:
            step = next_step(found, now_ms=self.clock_ms(), read_only=read_only)
            if step == Step.REPLAY:
                assert found is not None
                return _result(call, found.output, found.outcome, found.duration_ms, replayed=True)
            if step == Step.WAIT:
                assert found is not None
                found, seen = await self.books.wait_done(key, found.deadline_ms, self.clock_ms)
                if found is None:  # its book expired meanwhile: claim it afresh
                    found, seen = await self.books.claim(key, mine)
                continue
            if step == Step.UNKNOWN:
                assert seen is not None
                unknown = self._done(UNKNOWN_TEXT, UNKNOWN)
                if await self.books.take_over(key, seen, unknown):
                    log.warning("call %s: its worker died mid-call; outcome unknown", key)
                    return _result(call, UNKNOWN_TEXT, UNKNOWN)
                found, seen = await self.books.claim(key, mine)
                continue
            if step == Step.RERUN:
                assert seen is not None
                if not await self.books.take_over(key, seen, mine):
                    found, seen = await self.books.claim(key, mine)
                    continue
            if unconfirmed:
                entry = self._done(UNCONFIRMED_TEXT, CANCELLED)
            else:
                entry = await self._run(turn, call, spec)
            await self.books.record(key, entry)
            return _result(call, entry.output, entry.outcome, entry.duration_ms)

    async def _run(self, turn: TurnSubmitted, call: ToolCall, spec: ToolSpec | None) -> BookEntry:
        """Run a call this worker holds the claim of; its book entry once done."""
        if await self.redis.exists(self.names.cancelled_key(turn.turn_id)):
            return self._done(CANCELLED_TEXT, CANCELLED)
        if spec is None or not spec.server:
            message = f"{call.name} is not a tool of this deployment"
            return self._done(message, "unknown_tool")
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return self._done("The call's arguments are not a JSON object.", "invalid_arguments")
        task = asyncio.create_task(
            self.servers.call(
                turn.tenant_id, call.name, arguments, idempotency_key=idempotency_key(call)
            )
        )
        running = self._running.setdefault(turn.turn_id, set())
        running.add(task)
        try:
            outcome = await task
        except asyncio.CancelledError:
            if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise  # this worker is stopping: the claim stays; a redelivery judges it
            return self._done(CUT_SHORT_TEXT, STOPPED)
        except ToolsError as err:
            return self._done(f"The tool call failed ({err.code}): {err}", err.code)
        finally:
            running.discard(task)
            if not running:
                self._running.pop(turn.turn_id, None)
        kind = "tool_error" if outcome.is_error else "ok"
        return self._done(outcome.text, kind, outcome.duration_ms)

    async def _confirmed(self, answer: TurnCompleted) -> bool:
        """The guessed turn was confirmed (True) or withdrawn / never confirmed in time."""
        confirmed = self.names.confirmed_key(answer.turn_id)
        cancelled = self.names.cancelled_key(answer.turn_id)
        deadline = self.clock_ms() + self.config.confirm_wait_s * 1000
        while self.clock_ms() < deadline:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.exists(confirmed)
                pipe.exists(cancelled)
                yes, no = await pipe.execute()
            if yes or no:  # confirmed wins: a withdrawn guess is never confirmed
                return bool(yes)
            await asyncio.sleep(CONFIRM_POLL_S)
        return False

    def _claim(self) -> BookEntry:
        now = self.clock_ms()
        deadline = now + (self.config.timeout_s + self.config.grace_s) * 1000
        return BookEntry(BookState.CLAIMED, self.config.worker_id, now, deadline)

    def _done(self, output: str, outcome: str, duration_ms: float = 0.0) -> BookEntry:
        now = self.clock_ms()
        return BookEntry(
            BookState.DONE, self.config.worker_id, now, now, output, outcome, duration_ms
        )

    async def _continue(self, turn: TurnSubmitted, results: list[ToolResult]) -> None:
        """Submit the turn that returns the results (the last round may call no more)."""
        choice = turn.tool_choice
        if turn.tool_round >= self.config.max_rounds:
            choice = ToolChoice(ToolChoiceMode.NONE)
        continued = msgspec.structs.replace(
            turn,
            tool_results=results,
            tool_choice=choice,
            submitted_at_ms=self.clock_ms(),
            speculative=False,  # it follows an answer the client was shown: confirmed
        )
        await self.producer.send_and_wait(
            self.config.submitted_topic, encode(continued), turn.conversation_id.encode()
        )


def _result(
    call: ToolCall, output: str, outcome: str, duration_ms: float = 0.0, *, replayed: bool = False
) -> ToolResult:
    run = ToolRun(
        idempotency_key(call),
        outcome,
        round(duration_ms, 3),
        replayed,
        len(call.arguments.encode()),
    )
    return ToolResult(call.call_id, output, call.name, run)

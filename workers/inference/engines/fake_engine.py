"""A deterministic engine: answers by echoing the question word by word at a fixed rate.

For unit tests of the service logic and for benchmarks that measure the pipeline alone
(tokens arrive at a known cadence, so any extra delay is the pipeline's).

Optionally (all off by default) it also simulates what makes routing matter on a real engine:
- `prefill_ms_per_token`: before its first token a request prefills the prompt tokens not in
  the prefix cache; prefills are serialised (one at a time per engine, as a GPU mostly runs
  them), while decode steps of admitted streams run in parallel at `token_interval_s`;
- `prefix_cache_tokens`: an LRU of prompt prefixes (`SimulatedPrefixCache`);
- `max_num_seqs`: streams admitted at once; the others wait (`waiting` in `snapshot`).
With the prefill or cache simulation on, prompts are sized like the router sizes them (four
characters a token, `schemas.prefix`); otherwise by words, as before.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import msgspec

from schemas.events import FinishReason, OutputFormat, ResponseFormat, Role
from schemas.prefix import message_chain, prefix_lengths
from workers.inference.engines.engine import EngineError, GenerationDelta, GenerationRequest
from workers.inference.engines.engine_stats import EngineSnapshot

CHARS_PER_TOKEN = 4


def fake_answer(request: GenerationRequest) -> list[str]:
    """The tokens the fake engine answers with: 'You said: <last user text>' plus history size
    (and the images it was given, so tests see them arrive). With a response format, that
    text inside the JSON the format asks for (`fake_json`)."""
    last_user = next((m.content for m in reversed(request.messages) if m.role == Role.USER), "")
    turns = sum(1 for m in request.messages if m.role == Role.USER)
    seen = f", {len(request.images)} images" if request.images else ""
    text = f"You said: {last_user} (turn {turns}{seen})"
    fmt = request.decoding.response_format
    if fmt is not None and fmt.type != OutputFormat.STRUCTURAL_TAG:  # tagged: free text
        text = fake_json(fmt, text)
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def fake_json(response_format: ResponseFormat, text: str) -> str:
    """A JSON answer of the requested shape, `text` in its strings. The fake's stand-in for
    guided decoding (tests of the pipeline around it only: real engines are tested for the
    enforcement itself)."""
    if response_format.type == OutputFormat.JSON_OBJECT:
        return msgspec.json.encode({"answer": text}).decode()
    schema = msgspec.json.decode(response_format.schema)
    return msgspec.json.encode(_instance(schema, schema, text)).decode()


def _instance(node: Any, root: dict, text: str) -> Any:
    """The simplest value `node` accepts (first choices, required properties only)."""
    if not isinstance(node, dict):
        return text
    if "$ref" in node:  # local: "#/$defs/name"
        target: Any = root
        for part in node["$ref"].lstrip("#").strip("/").split("/"):
            target = target[part] if part else target
        return _instance(target, root, text)
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if node.get(key):
            return _instance(node[key][0], root, text)
    kind = node.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = node.get("properties", {})
        wanted = node.get("required", list(props))
        return {name: _instance(props.get(name, {}), root, text) for name in wanted}
    if kind == "array":
        return [_instance(node.get("items", {}), root, text)] * node.get("minItems", 0)
    return {"string": text, "integer": 0, "number": 0, "boolean": False, "null": None}.get(
        kind, text
    )


def until_stop(tokens: Sequence[str], stop: Sequence[str]) -> list[str]:
    """The tokens before the first of the `stop` strings, cut inside the token where it
    starts (the string itself is not part of the answer, as vLLM and OpenAI do it)."""
    text = "".join(tokens)
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    if not found:
        return list(tokens)
    end, kept, at = min(found), [], 0
    for token in tokens:
        if at >= end:
            break
        kept.append(token[: end - at])
        at += len(token)
    return kept or [""]  # stopped at once: one empty token ends the answer


class SimulatedPrefixCache:
    """The prompt prefixes an engine still holds computed, keyed by `message_chain` entry,
    bounded by `capacity_tokens` (least recently used evicted first).

    An entry weighs only its own message's tokens: prompts sharing a head share its blocks.
    A lookup walks from the first message and stops at the first miss (a block is useless
    without the ones before it); entries are touched last message first, so the LRU evicts
    a prompt's tail before its head, as vLLM frees a request's blocks."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self.tokens = 0
        self._entries: OrderedDict[int, int] = OrderedDict()  # chain entry -> its tokens

    def lookup(self, chain: Sequence[int], sizes: Sequence[int]) -> int:
        """Tokens of the prompt's longest cached prefix (touched: used just now)."""
        matched = 0
        while matched < len(chain) and chain[matched] in self._entries:
            matched += 1
        for index in reversed(range(matched)):
            self._entries.move_to_end(chain[index])
        return sum(sizes[:matched])

    def insert(self, chain: Sequence[int], sizes: Sequence[int]) -> None:
        """Keep a computed prompt, then evict down to capacity."""
        for index in reversed(range(len(chain))):
            if chain[index] not in self._entries:
                self.tokens += sizes[index]
            self._entries[chain[index]] = sizes[index]
            self._entries.move_to_end(chain[index])
        while self.tokens > self.capacity_tokens and self._entries:
            _, size = self._entries.popitem(last=False)
            self.tokens -= size

    def __len__(self) -> int:
        return len(self._entries)


def message_tokens(request: GenerationRequest) -> list[int]:
    """Each message's share of the prompt in tokens (four characters a token, template
    included), so that a prefix's tokens are the sum of its messages'."""
    ends = [length // CHARS_PER_TOKEN for length in prefix_lengths(request.messages)]
    return [end - start for start, end in zip([0, *ends], ends, strict=False)]


class FakeEngine:
    model_name = "fake-echo"
    accepts_images = True

    def __init__(
        self,
        token_interval_s: float = 0.02,
        fail_on: str | None = None,
        kv_capacity_tokens: int = 4096,
        *,
        prefill_ms_per_token: float = 0.0,
        prefix_cache_tokens: int = 0,
        max_num_seqs: int = 0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """`max_num_seqs` 0: every stream runs at once. `sleep` is how it waits (a test
        passes a fake clock's)."""
        self.token_interval_s = token_interval_s
        self.fail_on = fail_on  # a user text that makes the engine raise (tests the error path)
        self.requests: list[str] = []  # every request id it was asked to generate
        self.aborted: list[str] = []
        self.active = 0  # streams open, admitted or waiting
        self.waiting = 0  # streams waiting for one of the `max_num_seqs` slots
        # Its own books, reported by `snapshot`: a stream holds its prompt and answer tokens
        # in a pretend KV cache of `kv_capacity_tokens`.
        self.kv_capacity_tokens = kv_capacity_tokens
        self.kv_tokens = 0
        self.prompt_tokens = 0  # computed (prefilled), not served from the prefix cache
        self.generation_tokens = 0
        self.prefix_cache_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_cache_hits = 0  # ... and found there
        self.prefill_ms_per_token = prefill_ms_per_token
        self.cache = SimulatedPrefixCache(prefix_cache_tokens) if prefix_cache_tokens else None
        # what its cache holds, for the worker's prefix memory (None: no simulated cache)
        self.cache_tokens = prefix_cache_tokens or None
        self.max_num_seqs = max_num_seqs
        self._sleep = sleep
        self._slots = asyncio.Semaphore(max_num_seqs) if max_num_seqs > 0 else None
        self._prefill = asyncio.Lock()  # one prefill at a time

    @property
    def simulates_prefill(self) -> bool:
        return self.cache is not None or self.prefill_ms_per_token > 0

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        tokens = until_stop(fake_answer(request), request.decoding.stop)
        limit = request.decoding.max_tokens
        self.requests.append(request.request_id)
        self.active += 1
        held = 0
        admitted = False
        try:
            admitted = await self._admit()
            prompt_tokens, cached = await self._prefill_prompt(request)
            held = prompt_tokens
            self.kv_tokens += held
            for i, token in enumerate(tokens[:limit]):
                await self._sleep(self.token_interval_s)
                if self.fail_on is not None and self.fail_on in request.messages[-1].content:
                    raise EngineError("fake engine failure", code="engine_error")
                self.generation_tokens += 1
                self.kv_tokens += 1
                held += 1
                last = i == min(len(tokens), limit) - 1
                reason = None
                if last:
                    reason = FinishReason.STOP if len(tokens) <= limit else FinishReason.LENGTH
                yield GenerationDelta(token, 1, prompt_tokens, cached, reason)
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request.request_id)
            raise
        finally:
            self.active -= 1
            self.kv_tokens -= held
            if admitted and self._slots is not None:
                self._slots.release()

    async def _admit(self) -> bool:
        """Wait for a slot of the running batch (never waits without `max_num_seqs`)."""
        if self._slots is None:
            return False
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        return True

    async def _prefill_prompt(self, request: GenerationRequest) -> tuple[int, int]:
        """(prompt tokens, of which cached), after the prefill of the uncached rest."""
        if not self.simulates_prefill:
            prompt_tokens = sum(len(m.content.split()) + 4 for m in request.messages)
            self.prompt_tokens += prompt_tokens
            return prompt_tokens, 0
        sizes = message_tokens(request)
        prompt_tokens = sum(sizes)
        async with self._prefill:
            cached = 0
            chain = (
                message_chain(request.messages, request.cache_salt)
                if self.cache is not None
                else []
            )
            if self.cache is not None:
                # like vLLM: the last prompt token is always computed
                cached = min(self.cache.lookup(chain, sizes), max(0, prompt_tokens - 1))
                self.prefix_cache_queries += prompt_tokens
                self.prefix_cache_hits += cached
            computed = prompt_tokens - cached
            if self.prefill_ms_per_token > 0 and computed > 0:
                await self._sleep(computed * self.prefill_ms_per_token / 1000)
            self.prompt_tokens += computed
            if self.cache is not None:
                self.cache.insert(chain, sizes)
        return prompt_tokens, cached

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            running=self.active - self.waiting,
            waiting=self.waiting,
            kv_cache_usage=min(1.0, self.kv_tokens / self.kv_capacity_tokens),
            prefix_cache_queries=self.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
        )

    async def close(self) -> None:
        return None

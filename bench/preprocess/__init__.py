"""What preprocessing costs: throughput of the models in-process, and the latency the
preprocessing hop adds to a turn, measured at the WebSocket client.

(a) In-process, no Kafka: spoken questions (espeak-ng, 2-6 s with quiet room around them,
    WebM/Opus) through `SpeechPipeline.recognize` (decode → Silero VAD → Whisper), one at a
    time and from 2 threads (one shared pipeline, as the worker runs it; and two pipelines
    with one ASR thread each); the baseline is real time (RTF = processing / audio seconds).
    Photo-like JPEGs (1024x768 and 4000x3000) through `preprocess_image`, and through
    `VisionPipeline.prepare` on Redis when the tensor is not stored yet (miss) vs stored (hit).
(b) Text turns through the whole stack on the fake engine (edge → Kafka → preprocess →
    assembly → inference → Redis → edge); baseline: the same engine in-process. Kafka record
    timestamps (producer wall clock, one host) of turns.submitted / enriched / assembled split
    the client's TTFT into hops, so the preprocessing hop's own p50/p99 is visible.
(c) End of speech → first token for a spoken question: the clip sent as one turn (the clock
    starts when the turn is sent: the speech has ended) or streamed with `audio.append`
    beforehand (the clock starts after the last piece); baseline: the same question typed.

    python -m bench.preprocess                    # all three, ~3 min on 2 cores
    python -m bench.preprocess --parts a --clips 24

Prints p50/p99 tables and ratios, writes bench/results/preprocess.{json,png} and copies the
figure to bench/figures/preprocess.png.
"""

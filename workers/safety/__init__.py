"""Safety checks around the engine: input screening before a turn reaches the GPU, and the
incremental check of the answer as it streams (windows → release or cut).

The modules here are pure building blocks (normalisation, rules, the profanity model, the
verdicts, output windowing, the blacklist); the worker roles wire them to Kafka and Redis.
"""

"""Safety checks around the engine: input screening before a turn reaches the GPU, and the
incremental check of the answer as it streams (windows → release or cut).

A library, not a role: the preprocess worker screens inputs with it, the inference worker
windows and gates its answers, the safety worker judges windows, the audit worker reads whole
answers, the image worker screens pictures, the flywheel evaluates. The modules are building
blocks (normalisation, rules, the profanity and category models, the image detector, verdicts,
output windowing, the blacklist); the roles wire them to Kafka and Redis.
"""

"""Preprocessing worker: audio (VAD + batch ASR) and images (fetch, decode, patches) of a turn,
before prompt assembly. Consumes `turns.submitted`, emits `turns.enriched`."""

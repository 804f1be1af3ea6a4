"""Speech out: streamed text-to-speech (workers/tts)."""

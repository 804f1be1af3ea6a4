"""The WebSocket edge: a pure session protocol (`session`) in a thin asyncio shell (`server`)."""

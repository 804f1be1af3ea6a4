"""The edge's HTTP door: an OpenAI-compatible API with resumable Server-Sent Events."""

"""Server-side tools: the MCP servers a deployment lists, their tools offered to the model
under per-tenant allow-lists, and calls run with timeouts and size limits (the tools
worker's consumer loop and its exactly-once books come next: docs/tools.md)."""

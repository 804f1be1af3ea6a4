"""Server-side tools: the MCP servers a deployment lists, their tools offered to the model
under per-tenant allow-lists, and the tools worker that runs an answer's calls exactly once
(its books in Redis) and submits the turn that returns their results (docs/tools.md)."""

"""Real MCP servers, written with the official SDK, that the tools worker is tested against:
a calculator (stdio; pure, plus a slow tool and a huge result for the limits) and a
key-value store with side effects (streamable HTTP; every write appended to a books file,
so a test counts side effects as an auditor would)."""

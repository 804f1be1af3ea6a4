"""Errors of server-side tools. Each carries the stable `code` that reaches the model (in
the call's result) and the client (in the trace), and whether retrying could help.

ToolsError                  root of the tree                                  tool_error
├── ToolsConfigError        the server list or the allow-list is unreadable  tools_config
├── ToolNotAllowed          the tenant may not call this tool                 tool_not_allowed
├── UnknownTool             no listed server offers it                        unknown_tool
├── ToolTimeout             the call took longer than its timeout             tool_timeout
├── ToolResultTooLarge      the result is over the size limit                 tool_result_too_large
└── ToolServerUnavailable   the server could not be reached or broke the protocol
                                                                              tool_server_unavailable
"""

from __future__ import annotations

from schemas.errors import TurnstreamError


class ToolsError(TurnstreamError):
    code = "tool_error"
    retryable = False

    @property
    def message(self) -> str:
        return str(self)


class ToolsConfigError(ToolsError, ValueError):
    code = "tools_config"


class ToolNotAllowed(ToolsError):
    code = "tool_not_allowed"


class UnknownTool(ToolsError):
    code = "unknown_tool"


class ToolTimeout(ToolsError):
    code = "tool_timeout"
    retryable = True


class ToolResultTooLarge(ToolsError):
    code = "tool_result_too_large"


class ToolServerUnavailable(ToolsError):
    code = "tool_server_unavailable"
    retryable = True

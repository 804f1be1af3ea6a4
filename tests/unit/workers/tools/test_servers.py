"""The MCP servers a deployment lists and the per-tenant allow-list, read from settings."""

from __future__ import annotations

import json

import pytest

from schemas.tools import AllowList, qualified, split_qualified
from workers.tools.errors import ToolsConfigError
from workers.tools.servers import ServerSpec, allow_list, parse_servers


def test_servers_by_command_or_url():
    text = json.dumps(
        [
            {"name": "calc", "command": ["python", "-m", "calc"]},
            {"name": "kv", "url": "http://127.0.0.1:8931/mcp"},
        ]
    )
    assert parse_servers(text) == [
        ServerSpec("calc", ("python", "-m", "calc")),
        ServerSpec("kv", url="http://127.0.0.1:8931/mcp"),
    ]
    assert parse_servers("") == []


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"name": "x"}',
        '[{"command": ["a"]}]',
        '[{"name": "a.b", "command": ["a"]}]',
        '[{"name": "a", "command": ["a"]}, {"name": "a", "url": "http://x"}]',
        '[{"name": "a"}]',
        '[{"name": "a", "command": ["a"], "url": "http://x"}]',
        '[{"name": "a", "command": "python -m x"}]',
        '[{"name": "a", "url": "file:///etc/passwd"}]',
    ],
)
def test_a_bad_server_list_is_refused_at_start(bad):
    with pytest.raises(ToolsConfigError):
        parse_servers(bad)


def test_the_allow_list_is_per_tenant_and_empty_allows_nothing():
    allow = AllowList.parse("acme=calc__*,kv__get; *=calc__add")
    assert allow.allows("acme", "calc__divide") and allow.allows("acme", "kv__get")
    assert not allow.allows("acme", "kv__put")
    assert allow.allows("globex", "calc__add") and not allow.allows("globex", "calc__divide")
    assert not AllowList.parse("").allows("acme", "calc__add")
    with pytest.raises(ToolsConfigError):  # the worker's setting: its own error tree
        allow_list("acme")


def test_qualified_names_fit_openais_and_split_back():
    name = qualified("kv", "put")
    assert name == "kv__put" and split_qualified(name) == ("kv", "put")

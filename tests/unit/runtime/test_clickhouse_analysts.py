"""The analysts' file: hashes only, owner-readable, replaced atomically; the CLI."""

from __future__ import annotations

import pytest

from runtime.clickhouse import analysts
from runtime.clickhouse.http_auth import identify


def test_add_load_and_identify(tmp_path):
    path = tmp_path / "analysts.json"
    password = analysts.add(path, "acme_analyst", ["acme", "acme", "beta"])
    assert password not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    credentials = analysts.load(path)
    assert credentials["acme_analyst"].tenants == ("acme", "beta")
    who = identify(("acme_analyst", password), "root-pw", credentials)
    assert who == analysts.Analyst("acme_analyst", ("acme", "beta"))
    assert identify(("acme_analyst", "guess"), "root-pw", credentials) is None
    assert identify(("default", "root-pw"), "root-pw", credentials) == analysts.Analyst("default")
    assert identify(("default", password), "root-pw", credentials) is None


def test_names_and_tenants_are_checked(tmp_path):
    with pytest.raises(ValueError):
        analysts.add(tmp_path / "a.json", "default", ["acme"])
    with pytest.raises(ValueError):
        analysts.add(tmp_path / "a.json", "x y", ["acme"])
    with pytest.raises(ValueError):
        analysts.add(tmp_path / "a.json", "ok", [])
    assert analysts.load(tmp_path / "missing.json") == {}


def test_cli_adds_lists_prints_server_sql_and_removes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TURNSTREAM_HOME", str(tmp_path))
    assert analysts.main(["add", "acme_analyst", "--tenant", "acme"]) == 0
    assert "password (shown once): " in capsys.readouterr().out
    assert analysts.main(["list"]) == 0
    assert capsys.readouterr().out == "acme_analyst\tacme\n"
    assert analysts.main(["sql", "acme_analyst"]) == 0
    assert "ON turnstream.events USING tenant_id IN ('acme')" in capsys.readouterr().out
    assert analysts.main(["remove", "acme_analyst"]) == 0
    assert analysts.main(["remove", "acme_analyst"]) == 2

"""Credentials the sink's ClickHouse interface takes, as a server takes them, and its
generated password (kept, owner-only, agreed on by every process of one home)."""

from __future__ import annotations

import base64

from runtime.clickhouse.http_auth import PASSWORD_FILE, USER, allowed, local_password, presented
from runtime.settings import Settings


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_each_way_of_presenting_credentials():
    assert presented(basic("default", "p:w"), {}) == ("default", "p:w")  # ':' in a password
    headers = {"X-ClickHouse-User": "default", "X-ClickHouse-Key": "pw"}
    assert presented(headers, {}) == ("default", "pw")
    assert presented({"X-ClickHouse-Key": "pw"}, {}) == (USER, "pw")
    assert presented({}, {"user": "default", "password": "pw"}) == ("default", "pw")
    assert presented({}, {"query": "SELECT 1"}) is None
    assert presented({"Authorization": "Basic !!!not-base64"}, {}) is None
    assert presented({"Authorization": "Bearer abc"}, {}) is None


def test_only_the_user_with_the_password_is_allowed():
    assert allowed(("default", "pw"), "pw")
    assert not allowed(("default", "pW"), "pw")
    assert not allowed(("admin", "pw"), "pw")
    assert not allowed(None, "pw")
    assert not allowed(("default", ""), "pw")


def test_the_password_comes_from_the_environment_first(tmp_path):
    settings = Settings(state_dir=str(tmp_path), clickhouse_http_password="from-env")
    assert local_password(settings) == "from-env"
    assert not (tmp_path / PASSWORD_FILE).exists()


def test_a_generated_password_is_kept_owner_only(tmp_path):
    settings = Settings(state_dir=str(tmp_path / "home"))
    first = local_password(settings)
    assert len(first) >= 32 and local_password(settings) == first  # kept across starts
    assert (tmp_path / "home" / PASSWORD_FILE).stat().st_mode & 0o777 == 0o600
    assert local_password(Settings(state_dir=str(tmp_path / "other"))) != first

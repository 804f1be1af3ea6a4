"""Endpoints reachable from other hosts authenticate: the startup checks, and the metrics
endpoint's bearer token on a real HTTP server."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from harness.metrics import free_port
from runtime.exposure import exposure_problems, is_loopback, require_safe_exposure
from runtime.prometheus import serve_metrics
from runtime.settings import DEV_AUTH_SECRET, Settings
from schemas.errors import SettingsError

STRONG = "x" * 64


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "edge.example", "", "127.0.0.1x"])
def test_everything_else_is_exposed(host):
    assert not is_loopback(host)


def test_the_local_defaults_start():
    assert exposure_problems(Settings(metrics_port=9100), edge=True) == []


def test_metrics_off_loopback_need_a_token():
    exposed = Settings(metrics_port=9100, metrics_host="0.0.0.0")
    assert "TURNSTREAM_METRICS_TOKEN" in exposure_problems(exposed)[0]
    with pytest.raises(SettingsError, match="refusing to start"):
        require_safe_exposure(exposed)
    assert exposure_problems(Settings(metrics_port=0, metrics_host="0.0.0.0")) == []  # off
    with_token = Settings(metrics_port=9100, metrics_host="0.0.0.0", metrics_token=STRONG)
    assert exposure_problems(with_token) == []


def test_an_exposed_edge_needs_a_real_secret():
    public = Settings(edge_host="0.0.0.0")
    assert public.auth_secret == DEV_AUTH_SECRET
    assert "default" in exposure_problems(public, edge=True)[0]
    assert exposure_problems(public) == []  # a worker does not serve the edge
    short = Settings(edge_host="0.0.0.0", auth_secret="hunter2")
    assert "32 bytes" in exposure_problems(short, edge=True)[0]
    assert exposure_problems(Settings(edge_host="0.0.0.0", auth_secret=STRONG), edge=True) == []


def get(port: int, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_the_metrics_endpoint_answers_only_its_token():
    port = free_port()
    serve_metrics(port, "127.0.0.1", token=STRONG)
    assert get(port, None)[0] == 401
    status, body = get(port, "y" * 64)
    assert status == 401 and "TURNSTREAM_METRICS_TOKEN" in body
    status, body = get(port, STRONG)
    assert status == 200 and "turnstream_consumer_lag_records" in body


def test_without_a_token_the_loopback_endpoint_is_open():
    port = free_port()
    serve_metrics(port)
    assert get(port, None)[0] == 200


async def test_an_edge_with_the_dev_secret_refuses_to_listen_publicly():
    from ws_edge.server import EdgeServer

    edge = EdgeServer(Settings(edge_host="0.0.0.0", edge_port=0))
    with pytest.raises(SettingsError, match="TURNSTREAM_AUTH_SECRET"):
        await edge.start()  # before it connects to anything or binds a port

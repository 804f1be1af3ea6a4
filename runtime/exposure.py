"""What a process may expose, checked at startup: an endpoint reachable from other hosts
must authenticate, with a secret from the environment, never the built-in dev default.

Loopback-only endpoints stay open for local development (the default binds 127.0.0.1); the
moment one binds another address, the missing secret is a startup error, not a finding.
"""

from __future__ import annotations

import ipaddress

from runtime.settings import DEV_AUTH_SECRET, Settings
from schemas.errors import SettingsError

MIN_SECRET_BYTES = 32  # HS256: a key shorter than the hash is brute-forceable offline


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; anything else (0.0.0.0, a pod IP, a name) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problems(settings: Settings, *, edge: bool = False) -> list[str]:
    """Why this configuration must not start (empty: it may). `edge`: the process serves
    the WebSocket edge too."""
    problems = []
    exposed_metrics = settings.metrics_port and not is_loopback(settings.metrics_host)
    if exposed_metrics and not settings.metrics_token:
        problems.append(
            f"the metrics endpoint binds {settings.metrics_host}: set "
            "TURNSTREAM_METRICS_TOKEN (scrapers send it as a bearer token)"
        )
    if edge and not is_loopback(settings.edge_host):
        if settings.auth_secret == DEV_AUTH_SECRET:
            problems.append(
                f"the edge binds {settings.edge_host} with the local-only default "
                "TURNSTREAM_AUTH_SECRET: set a secret of your own"
            )
        elif len(settings.auth_secret.encode()) < MIN_SECRET_BYTES:
            problems.append(
                f"TURNSTREAM_AUTH_SECRET is shorter than {MIN_SECRET_BYTES} bytes "
                "(openssl rand -hex 32 makes one)"
            )
    return problems


def require_safe_exposure(settings: Settings, *, edge: bool = False) -> None:
    problems = exposure_problems(settings, edge=edge)
    if problems:
        raise SettingsError("refusing to start: " + "; ".join(problems))

"""SafeFetcher against httpx.MockTransport and a fake resolver: the SSRF policy, pinning to the
validated address, redirects, size and time limits, error mapping. No sockets."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import httpx
import pytest

from workers.preprocess.errors import (
    FetchFailed,
    FetchTimeout,
    FetchTooLarge,
    TooManyRedirects,
    UrlBlocked,
)
from workers.preprocess.fetch import FetchLimits, SafeFetcher, blocked_reason

PUBLIC = "93.184.215.14"
PUBLIC_2 = "151.101.1.69"
PUBLIC_V6 = "2606:4700::6810:85e5"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100

DNS = {
    "images.example.com": [PUBLIC],
    "cdn.example.net": [PUBLIC_V6, PUBLIC_2],
    "other.example.org": [PUBLIC_2],
    "rebind.example.com": ["127.0.0.1"],
    "metadata.example.com": ["169.254.169.254"],
    "mixed.example.com": [PUBLIC, "10.0.0.5"],
    "mapped.example.com": ["::ffff:10.0.0.5"],
}


class Stall:
    """An await that outlasts every fetch limit used with it, counting how it ended.

    It needs no wall-clock margin: the fetch's deadline is an earlier timer on the same event
    loop, so it fires first however slow the machine is. Were the deadline missing, the stall
    would run out and be counted as `finished`."""

    def __init__(self, seconds: float = 5.0) -> None:
        self.seconds = seconds
        self.entered = self.cancelled = self.finished = 0

    async def __call__(self) -> None:
        self.entered += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1


class FakeDNS:
    def __init__(self, stall: Stall | None = None) -> None:
        self.asked: list[str] = []
        self.stall = stall

    async def __call__(self, host: str) -> list[str]:
        self.asked.append(host)
        if self.stall:
            await self.stall()
        if host not in DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return DNS[host]


class Server:
    """A MockTransport handler that records every request it was sent."""

    def __init__(self, respond) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self.respond(request)
        if asyncio.iscoroutine(response):
            response = await response
        return response


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"Content-Type": "image/png"}, content=PNG)


def fetcher(server: Server, dns: FakeDNS | None = None, **limits) -> SafeFetcher:
    return SafeFetcher(
        FetchLimits(**limits), transport=httpx.MockTransport(server), resolver=dns or FakeDNS()
    )


async def test_happy_path_connects_to_the_validated_address():
    server, dns = Server(ok), FakeDNS()
    async with fetcher(server, dns) as f:
        body = await f.fetch("https://Images.Example.com/cat.png?size=l#frag")
    assert body.data == PNG
    assert body.content_type == "image/png"
    assert body.url == "https://Images.Example.com/cat.png?size=l#frag"
    assert body.final_url == "https://images.example.com/cat.png?size=l"
    assert dns.asked == ["images.example.com"]
    [request] = server.requests
    # Pinned: the connection goes to the IP we checked; the name is only in Host and TLS.
    assert request.url.host == PUBLIC
    assert request.url.path == "/cat.png"
    assert request.headers["host"] == "images.example.com"
    assert request.extensions["sni_hostname"] == "images.example.com"
    assert request.headers["accept-encoding"] == "identity"


async def test_a_public_ip_literal_is_fetched_without_dns():
    server, dns = Server(ok), FakeDNS()
    async with fetcher(server, dns) as f:
        await f.fetch(f"https://{PUBLIC}/x.png")
    assert dns.asked == []
    assert server.requests[0].url.host == PUBLIC
    assert "sni_hostname" not in server.requests[0].extensions


async def test_an_unreachable_address_falls_back_to_the_next_validated_one():
    def respond(request):
        if request.url.host == PUBLIC_V6:
            raise httpx.ConnectError("network unreachable")
        return ok(request)

    server = Server(respond)
    async with fetcher(server) as f:
        body = await f.fetch("https://cdn.example.net/a.png")
    assert body.data == PNG
    assert [r.url.host for r in server.requests] == [PUBLIC_V6, PUBLIC_2]


@pytest.mark.parametrize(
    "url",
    [
        "http://images.example.com/a.png",
        "ftp://images.example.com/a.png",
        "data:image/png;base64,iVBORw0KGgo=",
        "/relative/a.png",
        "https://127.0.0.1/",
        "https://127.1.2.3/",
        "https://[::1]/",
        "https://[::]/",
        "https://0.0.0.0/",
        "https://10.0.0.1/",
        "https://172.16.5.4/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/",
        "https://224.0.0.1/",
        "https://255.255.255.255/",
        "https://[fe80::1]/",
        "https://[fd00::1]/",
        "https://[fec0::1]/",
        "https://[ff02::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:169.254.169.254]/",
        "https://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
        "https://2130706433/",  # 127.0.0.1 as one decimal number
        "https://0x7f000001/",
        "https://0x7f.1/",
        "https://0177.0.0.1/",  # octal
        "https://127.1/",
        "https://017700000001/",
        "https://localhost/",
        "https://LOCALHOST./",
        "https://api.localhost/",
        "https://printer.local/",
        "https://metadata.google.internal/",
        "https://metadata/",  # single label: resolved through the search domains
        "https://user@images.example.com/a.png",
        "https://user:pw@images.example.com/a.png",
        "https://images.example.com:8443/a.png",
        "https://images.example.com:80/a.png",
        "https://rebind.example.com/a.png",  # a public-looking name resolving to loopback
        "https://metadata.example.com/",
        "https://mixed.example.com/a.png",  # one private answer among public ones is enough
        "https://mapped.example.com/a.png",
    ],
)
async def test_blocked_urls_never_reach_the_network(url):
    server = Server(ok)
    async with fetcher(server) as f:
        with pytest.raises(UrlBlocked):
            await f.fetch(url)
    assert server.requests == []


def test_address_policy_edges():
    def blocked(text: str) -> bool:
        return blocked_reason(ipaddress.ip_address(text)) is not None

    assert not blocked(PUBLIC)
    assert not blocked(PUBLIC_V6)
    assert not blocked("64:ff9b::5db8:d70e")  # NAT64 of a public IPv4: IPv6-only hosts need it
    assert not blocked(f"::ffff:{PUBLIC}")
    assert blocked("2002:7f00:1::")  # 6to4 wrapping 127.0.0.1
    assert blocked("2001:db8::1")
    assert blocked("192.0.2.1")
    assert blocked("198.18.0.1")
    assert blocked("fe80::1%eth0")


async def test_a_port_allow_list_can_be_widened():
    server = Server(ok)
    async with fetcher(server, allowed_ports=frozenset({443, 8443})) as f:
        await f.fetch("https://images.example.com:8443/a.png")
    assert server.requests[0].headers["host"] == "images.example.com:8443"
    assert server.requests[0].url.port == 8443


async def test_unresolvable_host_fails():
    async with fetcher(Server(ok)) as f:
        with pytest.raises(FetchFailed, match="resolve"):
            await f.fetch("https://nowhere.example.com/a.png")


# --- redirects ------------------------------------------------------------------------------


def redirect_to(location: str, status: int = 302) -> httpx.Response:
    return httpx.Response(status, headers={"Location": location})


async def test_a_redirect_is_followed_and_pinned_again():
    def respond(request):
        if request.headers["host"] == "images.example.com":
            return redirect_to("https://other.example.org/real.png", 301)
        return ok(request)

    server, dns = Server(respond), FakeDNS()
    async with fetcher(server, dns) as f:
        body = await f.fetch("https://images.example.com/a.png")
    assert body.final_url == "https://other.example.org/real.png"
    assert dns.asked == ["images.example.com", "other.example.org"]
    assert [r.url.host for r in server.requests] == [PUBLIC, PUBLIC_2]
    assert server.requests[1].extensions["sni_hostname"] == "other.example.org"


async def test_a_relative_redirect_is_resolved_against_the_current_url():
    def respond(request):
        return redirect_to("../b.png") if request.url.path == "/x/a.png" else ok(request)

    server = Server(respond)
    async with fetcher(server) as f:
        body = await f.fetch("https://images.example.com/x/a.png")
    assert body.final_url == "https://images.example.com/b.png"


@pytest.mark.parametrize(
    "location",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://rebind.example.com/",
        "http://images.example.com/a.png",  # downgrade
        "https://2130706433/",
        "https://images.example.com:22/",
    ],
)
async def test_a_redirect_to_a_blocked_url_is_refused(location):
    server = Server(lambda request: redirect_to(location))
    async with fetcher(server) as f:
        with pytest.raises(UrlBlocked):
            await f.fetch("https://images.example.com/a.png")
    assert len(server.requests) == 1


async def test_a_redirect_loop_is_detected():
    def respond(request):
        other = "/b.png" if request.url.path == "/a.png" else "/a.png"
        return redirect_to(other)

    server = Server(respond)
    async with fetcher(server, max_redirects=10) as f:
        with pytest.raises(TooManyRedirects, match="loop"):
            await f.fetch("https://images.example.com/a.png")
    assert len(server.requests) == 2


def chain(request: httpx.Request) -> httpx.Response:
    """/hop/N redirects to /hop/N-1; /hop/0 is the image."""
    n = int(request.url.path.rsplit("/", 1)[1])
    return ok(request) if n == 0 else redirect_to(f"/hop/{n - 1}", 307)


async def test_a_chain_over_the_limit_is_refused():
    server = Server(chain)
    async with fetcher(server, max_redirects=3) as f:
        with pytest.raises(TooManyRedirects):
            await f.fetch("https://images.example.com/hop/4")
    assert len(server.requests) == 4  # the original and three followed redirects


async def test_a_chain_at_the_limit_is_followed():
    server = Server(chain)
    async with fetcher(server, max_redirects=3) as f:
        body = await f.fetch("https://images.example.com/hop/3")
    assert body.data == PNG
    assert body.final_url == "https://images.example.com/hop/0"


async def test_a_redirect_without_location_fails():
    async with fetcher(Server(lambda request: httpx.Response(302))) as f:
        with pytest.raises(FetchFailed, match="Location"):
            await f.fetch("https://images.example.com/a.png")


# --- size -----------------------------------------------------------------------------------


class EndlessBody:
    """A chunked body of 64 KiB pieces that never ends, counting what was pulled from it."""

    def __init__(self) -> None:
        self.pulled = 0

    async def __aiter__(self):
        while True:
            self.pulled += 1
            yield b"\x00" * 65536


async def test_a_streamed_body_over_the_limit_stops_early():
    stream = EndlessBody()
    server = Server(lambda request: httpx.Response(200, content=stream))
    async with fetcher(server, max_bytes=100_000) as f:
        with pytest.raises(FetchTooLarge):
            await f.fetch("https://images.example.com/huge.png")
    assert stream.pulled == 2  # 128 KiB read, then dropped


async def test_a_declared_length_over_the_limit_is_refused_before_reading():
    stream = EndlessBody()
    server = Server(
        lambda request: httpx.Response(200, headers={"Content-Length": "50000000"}, content=stream)
    )
    async with fetcher(server, max_bytes=1_000_000) as f:
        with pytest.raises(FetchTooLarge, match="Content-Length"):
            await f.fetch("https://images.example.com/huge.png")
    assert stream.pulled == 0


async def test_a_body_exactly_at_the_limit_is_accepted():
    server = Server(lambda request: httpx.Response(200, content=b"x" * 1000))
    async with fetcher(server, max_bytes=1000) as f:
        assert len((await f.fetch("https://images.example.com/a.png")).data) == 1000


async def test_a_compressed_body_is_refused():
    server = Server(
        lambda request: httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=b"x")
    )
    async with fetcher(server) as f:
        with pytest.raises(FetchFailed, match="Content-Encoding") as caught:
            await f.fetch("https://images.example.com/a.png")
    assert not caught.value.retryable


# --- time -----------------------------------------------------------------------------------


async def test_a_server_that_never_answers_times_out_within_the_limit():
    stall = Stall()

    async def respond(request):
        await stall()

    server = Server(respond)
    async with fetcher(server, total_s=0.2) as f:
        with pytest.raises(FetchTimeout):
            await f.fetch("https://images.example.com/a.png")
    assert len(server.requests) == 1
    # The fetch gave up on the pending response: cancelled by its deadline, not answered.
    assert (stall.entered, stall.cancelled, stall.finished) == (1, 1, 0)


class StallingBody:
    """Sends the first bytes of a PNG, then stalls; counts the chunks it handed out."""

    def __init__(self) -> None:
        self.stall = Stall()
        self.sent = 0

    async def __aiter__(self):
        self.sent += 1
        yield b"\x89PNG"
        await self.stall()
        self.sent += 1
        yield b"never"


async def test_a_body_that_stalls_times_out_within_the_limit():
    body = StallingBody()
    server = Server(lambda request: httpx.Response(200, content=body))
    async with fetcher(server, total_s=0.2) as f:
        with pytest.raises(FetchTimeout):
            await f.fetch("https://images.example.com/a.png")
    # The body was being read when the deadline cancelled the read mid-stall.
    assert body.sent == 1
    assert (body.stall.entered, body.stall.cancelled, body.stall.finished) == (1, 1, 0)


async def test_slow_dns_counts_against_the_same_deadline():
    server, stall = Server(ok), Stall()
    dns = FakeDNS(stall)
    async with fetcher(server, dns, total_s=0.2) as f:
        with pytest.raises(FetchTimeout):
            await f.fetch("https://images.example.com/a.png")
    assert dns.asked == ["images.example.com"]
    assert (stall.entered, stall.cancelled, stall.finished) == (1, 1, 0)
    assert server.requests == []  # the deadline ran out before anything was sent


async def test_the_deadline_covers_the_whole_redirect_chain():
    async def respond(request):
        await asyncio.sleep(0.08)  # each hop is quick, four of them are not
        return chain(request)

    async with fetcher(Server(respond), total_s=0.2, max_redirects=5) as f:
        with pytest.raises(FetchTimeout):
            await f.fetch("https://images.example.com/hop/4")


async def test_an_httpx_timeout_maps_to_fetch_timeout():
    def respond(request):
        raise httpx.ReadTimeout("read timed out", request=request)

    async with fetcher(Server(respond)) as f:
        with pytest.raises(FetchTimeout):
            await f.fetch("https://images.example.com/a.png")


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retryable"), [(404, False), (403, False), (503, True)])
async def test_a_non_2xx_status_fails_with_it(status, retryable):
    async with fetcher(Server(lambda request: httpx.Response(status))) as f:
        with pytest.raises(FetchFailed, match=str(status)) as caught:
            await f.fetch("https://images.example.com/a.png")
    assert caught.value.retryable is retryable


async def test_connection_errors_fail():
    def respond(request):
        raise httpx.ConnectError("connection refused")

    async with fetcher(Server(respond)) as f:
        with pytest.raises(FetchFailed, match="connect"):
            await f.fetch("https://images.example.com/a.png")


async def test_a_broken_connection_mid_body_fails():
    class Broken:
        async def __aiter__(self):
            yield b"\x89PNG"
            raise httpx.RemoteProtocolError("peer closed connection")

    async with fetcher(Server(lambda request: httpx.Response(200, content=Broken()))) as f:
        with pytest.raises(FetchFailed):
            await f.fetch("https://images.example.com/a.png")

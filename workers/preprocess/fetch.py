"""Fetching an image URL a user sent, without becoming a proxy into our own network (SSRF).

Policy, checked on the first URL and again on every redirect hop:

- `https` only, no userinfo (`https://user@host`), port in an allow-list (443 by default);
- no `localhost`, `*.localhost`, `*.local`, `*.internal` and no single-label names (those
  resolve through the search domains to internal hosts);
- IP literals only in canonical form (dotted-quad, bracketed IPv6); the inet_aton shapes
  `2130706433`, `0x7f000001`, `0x7f.1`, `0177.0.0.1` are refused outright, because
  getaddrinfo would quietly turn them into 127.0.0.1;
- every address the name resolves to must be public: one private answer refuses the URL.

DNS rebinding: the request goes to the address we validated, not to the name. The URL's host
is replaced by that IP, the `Host` header keeps the name, and httpcore's `sni_hostname`
request extension makes the TLS handshake send the name as SNI *and* verify the certificate
against it (`server_hostname`), so TLS is exactly as strict as a normal request to the name.
A second resolution (the attacker's TTL-0 answer pointing at 169.254.169.254) never happens.
Keep-alive is off in the default transport: the pool is keyed by IP, so a kept connection
could otherwise carry a request for another name that shares the IP without its certificate
being checked for that name. Environment proxies are ignored (a proxy would resolve the name
again itself).

Limits: the whole fetch (resolution, every hop, the body) runs under one deadline; the body
is streamed and dropped as soon as it passes `max_bytes`, and a `Content-Length` over it is
refused before reading. Content sniffing is left to the decoder (`images.sniff_image_format`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

import httpx

from workers.preprocess.errors import (
    FetchFailed,
    FetchTimeout,
    FetchTooLarge,
    TooManyRedirects,
    UrlBlocked,
)

Resolver = Callable[[str], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """What one fetch may cost."""

    max_bytes: int = 20 * 1024 * 1024
    total_s: float = 5.0
    max_redirects: int = 3
    allowed_ports: frozenset[int] = frozenset({443})
    user_agent: str = "turnstream-preprocess/0.1 (+image fetch)"

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.total_s <= 0 or self.max_redirects < 0:
            raise ValueError("fetch limits must be positive")


@dataclass(frozen=True, slots=True)
class FetchedBody:
    url: str
    final_url: str
    content_type: str | None
    data: bytes


# --- addresses ------------------------------------------------------------------------------

_BLOCKED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # TEST-NET-1
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # TEST-NET-2
        "203.0.113.0/24",  # TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
    )
)
_BLOCKED_V6 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/96",  # unspecified, loopback, IPv4-compatible (deprecated)
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo included)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: embeds an arbitrary IPv4
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def blocked_reason(address: IPAddress) -> str | None:
    """Why `address` must not be fetched from, or None when it is a public unicast address.

    The explicit ranges keep the answer independent of the Python patch release (the stdlib's
    `is_global` lists changed within 3.11.x); the stdlib flags are a second opinion. IPv4
    inside IPv6 (mapped `::ffff:a.b.c.d`, well-known NAT64 `64:ff9b::a.b.c.d`) is judged by
    the IPv4 it carries: blocking NAT64 whole would break IPv6-only deployments.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return blocked_reason(address.ipv4_mapped)
        if address in _NAT64:
            return blocked_reason(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        ranges: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = _BLOCKED_V6
        if address.is_site_local:
            return "site-local address"
    else:
        ranges = _BLOCKED_V4
    for network in ranges:
        if address in network:
            return f"address in {network}"
    for flag in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{flag}"):
            return f"{flag.replace('_', '-')} address"
    if not address.is_global:
        return "not a globally routable address"
    return None


def _check_address(text: str, host: str) -> IPAddress:
    try:
        address = ipaddress.ip_address(text)
    except ValueError as e:
        raise UrlBlocked(f"{host} resolved to {text!r}, not an IP address") from e
    reason = blocked_reason(address)
    if reason:
        raise UrlBlocked(f"{host} resolves to {address}: {reason}")
    return address


# --- URLs -----------------------------------------------------------------------------------

_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\Z")
_BLOCKED_NAMES = ("localhost", "local", "internal")


@dataclass(frozen=True, slots=True)
class _Target:
    """A URL that passed the policy: its host as ASCII, and the IP when the host is one."""

    url: httpx.URL
    host: str
    literal: IPAddress | None


def check_url(url: str | httpx.URL, allowed_ports: frozenset[int]) -> _Target:
    """Apply the URL half of the policy (everything but DNS). Raises UrlBlocked."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL as e:
        raise UrlBlocked(f"malformed URL: {e}") from e
    if parsed.scheme != "https":
        raise UrlBlocked(f"only https URLs are fetched, not {parsed.scheme or 'a relative'} URL")
    if parsed.userinfo:
        raise UrlBlocked("URLs with credentials (user@host) are refused")
    port = parsed.port or 443
    if port not in allowed_ports:
        raise UrlBlocked(f"port {port} is not allowed (allowed: {sorted(allowed_ports)})")
    host = parsed.raw_host.decode("ascii").lower().rstrip(".")
    if not host:
        raise UrlBlocked("URL has no host")
    try:  # httpx re-parses the host: `0177.0.0.1.` passes the first parse, not this one
        parsed = parsed.copy_with(host=host, fragment=None)
    except httpx.InvalidURL as e:
        raise UrlBlocked(f"malformed host {host!r}: {e}") from e
    if ":" in host:  # httpx has already unbracketed an IPv6 literal
        return _Target(parsed, host, _check_literal(host))
    labels = host.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        # WHATWG: a host whose last label is a number is an IPv4 address. Accept only the
        # canonical dotted-quad; every other spelling is a way to smuggle 127.0.0.1 past us.
        try:
            literal = ipaddress.IPv4Address(host)
        except ValueError as e:
            raise UrlBlocked(f"non-canonical numeric host {host!r} is refused") from e
        return _Target(parsed, host, _check_literal(str(literal)))
    if len(labels) == 1 or labels[-1] in _BLOCKED_NAMES:
        raise UrlBlocked(f"host {host!r} is local or internal")
    return _Target(parsed, host, None)


def _check_literal(text: str) -> IPAddress:
    try:
        address = ipaddress.ip_address(text)
    except ValueError as e:
        raise UrlBlocked(f"malformed IP host {text!r}") from e
    reason = blocked_reason(address)
    if reason:
        raise UrlBlocked(f"host {address} is refused: {reason}")
    return address


async def system_resolver(host: str) -> list[str]:
    """All addresses the system resolver gives for `host`, in its order of preference."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# --- the fetcher ----------------------------------------------------------------------------


class SafeFetcher:
    """Fetches image URLs under FetchLimits and the SSRF policy above.

    `transport` replaces the network (tests pass `httpx.MockTransport`); `resolver` replaces
    DNS. Use as `async with SafeFetcher(...) as f:` or call `aclose()`.
    """

    def __init__(
        self,
        limits: FetchLimits,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self._limits = limits
        self._resolve = resolver or system_resolver
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                retries=0, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0)
            )
        self._client = httpx.AsyncClient(
            transport=transport, follow_redirects=False, trust_env=False
        )
        self._timeout = httpx.Timeout(limits.total_s).as_dict()

    async def __aenter__(self) -> SafeFetcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str) -> FetchedBody:
        """GET `url` (https, public, redirects re-checked) and return its body.

        Raises UrlBlocked, FetchTimeout, FetchTooLarge, TooManyRedirects or FetchFailed.
        """
        try:
            async with asyncio.timeout(self._limits.total_s):
                return await self._fetch(url)
        except TimeoutError as e:
            raise FetchTimeout(f"fetch took over {self._limits.total_s:g}s") from e

    async def _fetch(self, url: str) -> FetchedBody:
        target = check_url(url, self._limits.allowed_ports)
        seen = {str(target.url)}
        for hop in range(self._limits.max_redirects + 1):
            response = await self._send(target)
            try:
                if response.status_code not in _REDIRECTS:
                    return await self._body(url, target, response)
                location = response.headers.get("location")
            finally:
                await response.aclose()
            if not location:
                raise FetchFailed(f"HTTP {response.status_code} redirect without a Location")
            try:
                next_url = target.url.join(location)
            except httpx.InvalidURL as e:
                raise UrlBlocked(f"malformed redirect Location: {e}") from e
            target = check_url(next_url, self._limits.allowed_ports)
            if str(target.url) in seen:
                raise TooManyRedirects(f"redirect loop back to {target.url} after {hop + 1} hops")
            seen.add(str(target.url))
        raise TooManyRedirects(f"more than {self._limits.max_redirects} redirects")

    async def _addresses(self, target: _Target) -> list[IPAddress]:
        if target.literal is not None:
            return [target.literal]
        try:
            answers = await self._resolve(target.host)
        except OSError as e:
            raise FetchFailed(f"cannot resolve {target.host}: {e}") from e
        if not answers:
            raise FetchFailed(f"{target.host} has no addresses")
        # All of them, not just the one we will use: the resolver's order is not ours to trust.
        return [_check_address(answer, target.host) for answer in answers]

    async def _send(self, target: _Target) -> httpx.Response:
        """Send to each validated address in turn until one accepts the connection."""
        failure: Exception | None = None
        for address in await self._addresses(target):
            try:
                return await self._client.send(self._request(target, address), stream=True)
            except httpx.ConnectError as e:
                failure = e
            except httpx.TimeoutException as e:
                raise FetchTimeout(f"{target.host}: {type(e).__name__}") from e
            except httpx.TransportError as e:
                raise FetchFailed(f"{target.host}: {type(e).__name__}: {e}") from e
        raise FetchFailed(f"cannot connect to {target.host}: {failure}") from failure

    def _request(self, target: _Target, address: IPAddress) -> httpx.Request:
        """A GET pinned to `address`: the name only travels in Host and in TLS (SNI and the
        certificate check). Built by hand so the client's cookie jar is never sent."""
        extensions: dict[str, object] = {"timeout": self._timeout}
        if target.literal is None:
            extensions["sni_hostname"] = target.host
        return httpx.Request(
            "GET",
            target.url.copy_with(host=str(address)),
            headers={
                "Host": target.url.netloc.decode("ascii"),
                "User-Agent": self._limits.user_agent,
                # No image/* nor avif: content-negotiating CDNs would pick AVIF, which we refuse.
                "Accept": "image/webp,image/png,image/jpeg,image/gif,*/*;q=0.1",
                "Accept-Encoding": "identity",
            },
            extensions=extensions,
        )

    async def _body(self, url: str, target: _Target, response: httpx.Response) -> FetchedBody:
        status = response.status_code
        if not 200 <= status < 300:
            error = FetchFailed(f"HTTP {status} from {target.host}")
            error.retryable = status >= 500 or status in (408, 425, 429)
            raise error
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            # We asked for identity; decoding gzip/br ourselves would invite a zip bomb.
            error = FetchFailed(f"{target.host} sent Content-Encoding {encoding!r}")
            error.retryable = False
            raise error
        limit = self._limits.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise FetchTooLarge(f"Content-Length {declared} is over the {limit} byte limit")
        body = bytearray()
        try:
            # Identity only (checked above), so aiter_bytes decodes nothing; unlike aiter_raw
            # it also serves a body the transport has already read into memory.
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise FetchTooLarge(f"body passed the {limit} byte limit")
        except httpx.TimeoutException as e:
            raise FetchTimeout(f"{target.host}: {type(e).__name__} reading the body") from e
        except httpx.TransportError as e:
            raise FetchFailed(f"{target.host}: {type(e).__name__} reading the body") from e
        return FetchedBody(
            url=url,
            final_url=str(target.url),
            content_type=response.headers.get("content-type"),
            data=bytes(body),
        )

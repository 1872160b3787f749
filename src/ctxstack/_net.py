"""Addresses and host names: which are loopback, and which ``Host`` a request named.

Shared by the service and the proxy (neither may import the other), so that both decide
"only this machine" the same way — they used to hold two copies that disagreed on
IPv4-mapped addresses (``::ffff:127.0.0.1``).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach.

    Decided by parsing, never by prefix: a literal loopback address (``127.0.0.0/8``,
    ``::1``, an IPv4-mapped ``::ffff:127.x.x.x``, also in brackets) or the name
    ``localhost``. Any other host name — even ``127.evil.example.com`` — may resolve
    anywhere, so it is not loopback. ``0.0.0.0`` (every interface) is not loopback.
    """
    text = host.strip()
    if text.lower() in LOOPBACK_NAMES:
        return True
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def host_name(header: str) -> str:
    """The host of a ``Host`` header value, lower-cased, without port or brackets
    (``"[::1]:8000"`` → ``"::1"``, ``"LocalHost:80"`` → ``"localhost"``); ``""`` when
    malformed."""
    text = header.strip().lower()
    if not text:
        return ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            return ""
        return text[1:end]
    if text.count(":") > 1:  # a bare IPv6 address (not valid in Host, but unambiguous)
        return text
    name, _, port = text.partition(":")
    if port and not port.isdigit():
        return ""
    return name


def origin_host(origin: str) -> str | None:
    """The host of an ``Origin`` header (``"http://localhost:3000"`` → ``"localhost"``);
    None for ``null`` or anything that is not a URL with a host."""
    text = origin.strip()
    if not text or text == "null":
        return None
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host:
        return None
    return host.lower()


def is_local_host(host: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a request's host (from :func:`host_name` / :func:`origin_host`) names this
    machine — a loopback address or ``localhost`` — or is one of the ``extra`` names the
    operator allowed."""
    return bool(host) and (is_loopback(host) or host in extra)


def parse_hosts(value: str | None) -> frozenset[str]:
    """A comma-separated list of host names (an allowed-hosts setting), normalised."""
    if not value:
        return frozenset()
    return frozenset(host_name(part) or part.strip().lower()
                     for part in value.split(",") if part.strip())


__all__ = ["host_name", "is_local_host", "is_loopback", "origin_host", "parse_hosts"]

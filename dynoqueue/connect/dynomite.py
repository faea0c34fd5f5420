"""The Dynomite profile of the builders (``from_url(..., dynomite=True)``): a node list that
fails over in order, and the settings Dynomite needs (see
:func:`dynoqueue.connect.builders.from_url`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import ConfigurationError
from ..model.clock import system_clock_ms
from ..model.settings import QueueOptions
from .failover import AsyncFailoverConnection, FailoverConnection
from .urls import ParsedUrl, parse_url

#: The builder's settings (``BuildSettings``: the factory's and ``shard_supplier``).
S = TypeVar("S", bound=QueueOptions)


def dynomite_nodes(url: str, asynchronous: bool) -> tuple[str, dict[str, Any]]:
    """A Dynomite URL's first node's URL, and the connection options that fail over to the
    others (``redis://h1:p1,h2:p2,...[/0][?...]``; none for one node)."""
    scheme, sep, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    hosts, tail = rest[:cut], rest[cut:]
    if not sep or scheme.lower() not in ("redis", "rediss") or "," not in hosts:
        return url, {}
    urls = [f"{scheme}://{host}{tail}" for host in hosts.split(",")]
    nodes = [parse_url(one).nodes[0] for one in urls]  # each checked as a URL of its own
    connection = AsyncFailoverConnection if asynchronous else FailoverConnection
    return urls[0], {"connection_class": connection, "addresses": nodes}


def dynomite_profile(parsed: ParsedUrl, settings: S, client_options: Mapping[str, Any] | None
                     ) -> tuple[S, dict[str, Any]]:
    """The settings and client options of the Dynomite profile (see ``from_url``'s
    ``dynomite``), refusing what Dynomite cannot do."""
    if parsed.kind != "single":
        raise ConfigurationError("the Dynomite profile takes redis://host:port of the local "
                                 "node (then of the nodes to fail over to, comma-separated)")
    if parsed.tls or parsed.username or parsed.password:
        raise ConfigurationError("Dynomite supports neither TLS to clients nor AUTH; "
                                 "secure it at the network level")
    options = dict(client_options or {})
    if parsed.options.get("db", 0) or options.get("db", 0):
        raise ConfigurationError("Dynomite has only db 0 (it does not forward SELECT)")
    if parsed.options.get("client_name") or options.get("client_name"):
        raise ConfigurationError("Dynomite does not accept CLIENT SETNAME: drop client_name")
    if settings.get("write_quorum", 0):
        raise ConfigurationError("Dynomite has no WAIT: replication across racks is its own "
                                 "(its consistency level); use write_quorum=0")
    if settings.get("doorbell") or settings.get("eval_scripts") is False:
        raise ConfigurationError("Dynomite has no pub/sub (doorbell=False) and a restarted "
                                 "rack loses its scripts (eval_scripts=True)")
    if settings.get("eviction_check", "off") != "off":
        raise ConfigurationError("Dynomite does not forward CONFIG GET (it closes the "
                                 "connection): check each rack's maxmemory-policy yourself "
                                 "and leave eviction_check off")
    # RESP2 and no CLIENT SETINFO: Dynomite closes the connection on commands it does not know.
    options.update(protocol=2, driver_info=None)
    # hash_tag stays the caller's choice: off shares keys with Java dyno-queues (one node per
    # rack), on is needed with several nodes per rack (Dynomite's hash_tag: "{}").
    profile = settings.copy()
    if "hash_tag" not in profile:
        profile["hash_tag"] = False
    if "clock" not in profile:
        profile["clock"] = system_clock_ms
    profile["doorbell"], profile["eval_scripts"] = False, True
    profile["eviction_check"] = "off"
    return profile, options

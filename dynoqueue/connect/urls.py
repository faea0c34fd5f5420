"""Deployment URLs: taking them apart, one credentials rule, and the one redactor.

Forms (``[user:password@]`` is an ACL user; ``:password@`` is the ``default`` user; a user
without a password is refused, because Redis cannot log in with a name alone and a lone word
before ``@`` is too often a password written in the wrong place):

* ``redis://[user:password@]host:port[/db]``, ``rediss://...`` (TLS), ``unix:///path.sock``:
  one server, or the primary of a zone ring.
* ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]`` and
  ``rediss+sentinel://...``: the address list names the sentinels.
* ``redis+cluster://[user:password@]host:port[,host:port...]`` and ``rediss+cluster://...``.

Query parameters go to redis-py: the TLS files (``?ssl_ca_certs=/path/ca.pem``), ``db``,
``socket_timeout``, ``socket_connect_timeout``, ``client_name``; others are refused, so a typo
does not silently turn TLS verification off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from ..errors import ConfigurationError

SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
TLS_PARAMS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
              "ssl_check_hostname", "ssl_password", "ssl_min_version")
OTHER_PARAMS = ("db", "socket_timeout", "socket_connect_timeout", "client_name")


@dataclass
class ParsedUrl:
    """A deployment URL taken apart (see the module docstring for the forms).

    Attributes:
        kind: ``"single"``, ``"sentinel"`` or ``"cluster"``.
        nodes: (host, port) of each address (one for single; empty for unix sockets).
        path: the unix socket path, for ``unix://``.
        options: the query parameters, typed (db int, timeouts float, ...).
    """

    kind: str
    url: str
    nodes: list[tuple[str, int]] = field(default_factory=list)
    service_name: str | None = None
    username: str | None = None
    password: str | None = None
    tls: bool = False
    path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def redact_url(url: str) -> str:
    """The URL with its credentials masked, for logs and error messages.

    One rule for every form: whatever stands between ``://`` and the last ``@`` is secret,
    except a user name before a colon (``redis://app:***@h``, ``redis://***@h``).
    """
    scheme, sep, rest = url.partition("://")
    userinfo, at, tail = rest.rpartition("@")
    if not sep or not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user + ':' if colon else ''}***@{tail}"


def parse_url(url: str) -> ParsedUrl:
    """Take a deployment URL apart.

    Returns:
        A :class:`ParsedUrl`.

    Raises:
        ConfigurationError: unknown scheme; a missing or bad host, port (naming it), service
            name or db; a user without a password; an unknown query parameter.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"not a Redis URL: {url!r}")
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    kinds = {**dict.fromkeys(SINGLE_SCHEMES, "single"), **dict.fromkeys(SENTINEL_SCHEMES,
             "sentinel"), **dict.fromkeys(CLUSTER_SCHEMES, "cluster")}
    if scheme not in kinds:
        raise ConfigurationError(
            f"unknown URL scheme {scheme!r}: use redis, rediss, unix, redis+sentinel, "
            "rediss+sentinel, redis+cluster or rediss+cluster")
    rest, _, query = rest.partition("?")
    userinfo, at, location = rest.rpartition("@")
    if not at:
        userinfo, location = "", rest
    parsed = ParsedUrl(kinds[scheme], url, tls=scheme.startswith("rediss"),
                       options=_query(query, url))
    parsed.username, parsed.password = _credentials(userinfo, url)
    if scheme == "unix":
        parsed.path = unquote(location.partition("?")[0]) or None
        if not parsed.path:
            raise ConfigurationError(f"a unix URL names a socket path: {redact_url(url)}")
        return parsed
    hosts, _, path = location.partition("/")
    parsed.nodes = [host_port(item, url, default_port=6379 if parsed.kind == "single" else None)
                    for item in hosts.split(",") if item]
    if not parsed.nodes:
        raise ConfigurationError(f"no host:port in {redact_url(url)}")
    segments = [unquote(s) for s in path.split("/") if s]
    if parsed.kind == "single":
        if len(parsed.nodes) > 1:
            raise ConfigurationError(f"a {scheme} URL names one server: {redact_url(url)}")
        if segments:
            parsed.options.setdefault("db", segments[0])
    elif parsed.kind == "sentinel":
        if not segments:
            raise ConfigurationError("a sentinel URL names its service: "
                                     f"redis+sentinel://host:port/<service_name> "
                                     f"({redact_url(url)})")
        parsed.service_name = segments[0]
        if len(segments) > 1:
            parsed.options.setdefault("db", segments[1])
    elif segments:
        raise ConfigurationError("a cluster URL has no path (Redis Cluster has only db 0): "
                                 f"{redact_url(url)}")
    parsed.options = typed_options(parsed.options, url)
    return parsed


def host_port(item: str, context: str, default_port: int | None = None) -> tuple[str, int]:
    """``"host:port"`` (or ``[v6]:port``) as a tuple; ``default_port`` when the port is left out.

    Raises:
        ConfigurationError: no host, or a port that is missing, not a number or out of range.
    """
    item = item.strip()
    if item.startswith("["):
        host, _, tail = item[1:].partition("]")
        colon, port = tail[:1], tail[1:]
    else:
        host, colon, port = item.rpartition(":")
        if not colon:
            host, port = item, ""
    if not host:
        raise ConfigurationError(f"expected host:port, got {item!r} in {redact_url(context)}")
    if not port:
        if default_port is None:
            raise ConfigurationError(f"expected host:port, got {item!r} in "
                                     f"{redact_url(context)}")
        return host, default_port
    try:
        number = int(port)
    except ValueError:
        raise ConfigurationError(f"bad port {port!r} in {redact_url(context)}: the port "
                                 "must be a number") from None
    if not 0 < number < 65536:
        raise ConfigurationError(f"port out of range: {number} in {redact_url(context)}")
    return host, number


def typed_options(options: dict[str, Any], url: str = "") -> dict[str, Any]:
    """URL query values are text; convert the ones redis-py wants typed.

    Raises:
        ConfigurationError: a value that is not of its type (naming the parameter).
    """
    typed = dict(options)
    try:
        for key, kind in (("db", int), ("socket_timeout", float),
                          ("socket_connect_timeout", float)):
            if isinstance(typed.get(key), str):
                typed[key] = kind(typed[key])
    except ValueError:
        raise ConfigurationError(f"bad value for {key!r} in {redact_url(url)}") from None
    if isinstance(typed.get("ssl_check_hostname"), str):
        typed["ssl_check_hostname"] = typed["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return typed


def _credentials(userinfo: str, url: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, secret = userinfo.partition(":")
    if not colon:
        raise ConfigurationError(
            f"{redact_url(url)} has a user but no password: write redis://:PASSWORD@host for "
            "the default user, or redis://USER:PASSWORD@host for an ACL user")
    return unquote(user) or None, unquote(secret)


def _query(query: str, url: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in TLS_PARAMS + OTHER_PARAMS:
            raise ConfigurationError(f"unknown URL parameter {key!r} in {redact_url(url)}; "
                                     f"known: {', '.join(TLS_PARAMS + OTHER_PARAMS)}")
        options[key] = value
    return options

"""Broker URLs: the ``dynoqueue`` schemes kombu hands the transport, as ``redis`` URLs.

kombu passes a transport whose ``can_parse_url`` is True the broker URL as its hostname. A
scheme with a ``+`` is split by kombu first: ``dynoqueue+sentinel://h:p/svc`` reaches the
transport as transport ``dynoqueue`` and hostname ``sentinel://h:p/svc``. Either way
:func:`redis_url` gives the URL :meth:`dynoqueue.RedisQueues.from_url` reads.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..errors import ConfigurationError

#: dynoqueue scheme -> the redis scheme RedisQueues.from_url reads.
SCHEMES = {
    "dynoqueue": "redis",
    "dynoqueues": "rediss",
    "dynoqueue+sentinel": "redis+sentinel",
    "dynoqueues+sentinel": "rediss+sentinel",
    "dynoqueue+cluster": "redis+cluster",
    "dynoqueues+cluster": "rediss+cluster",
}
#: Schemes passed through as they are (``broker_transport="dynoqueue.kombu:Transport"`` with
#: a redis URL).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel",
                           "redis+cluster", "rediss+cluster"})
#: What kombu leaves of a ``dynoqueue+x://`` URL after splitting at the ``+``.
SPLIT_KINDS = frozenset({"sentinel", "cluster"})


def redis_url(client: Any) -> str:
    """The redis URL of a kombu Connection that uses this transport.

    Args:
        client: the ``kombu.Connection`` (its ``hostname``, ``port``, ``userid``,
            ``password``, ``virtual_host``, ``transport_cls`` and ``uri_prefix``).

    Returns:
        A ``redis://``, ``rediss://``, ``redis+sentinel://``, ``redis+cluster://`` (or TLS)
        URL with the credentials and database of the broker URL.

    Raises:
        ConfigurationError: a scheme this transport does not serve.
    """
    hostname = client.hostname or "localhost"
    if "://" in hostname:
        scheme, _, rest = hostname.partition("://")
        if scheme in SCHEMES:
            return f"{SCHEMES[scheme]}://{rest}"
        if scheme in REDIS_SCHEMES:
            return hostname
        if scheme in SPLIT_KINDS:
            prefix = str(getattr(client, "uri_prefix", None) or client.transport_cls or "")
            base = "rediss" if prefix.endswith("dynoqueues") else "redis"
            return f"{base}+{scheme}://{rest}"
        raise ConfigurationError(
            f"the dynoqueue transport serves {', '.join(sorted(SCHEMES))} (and redis) URLs, "
            f"not {scheme}://")
    # A Connection built from parts (hostname, port, userid, ...), not from a URL.
    tls = str(client.transport_cls or "").endswith("dynoqueues") or bool(client.ssl)
    userinfo = ""
    if client.userid or client.password:
        userinfo = quote(client.userid or "", safe="")
        if client.password:
            userinfo += ":" + quote(client.password, safe="")
        userinfo += "@"
    port = client.port or 6379
    db = client.virtual_host if client.virtual_host not in (None, "", "/") else "0"
    return f"{'rediss' if tls else 'redis'}://{userinfo}{hostname}:{port}/{db}"

"""Builders: RedisQueues from a URL, a Sentinel service or a Redis Cluster, without hand-wiring.

Every deployment needs two connections (see :class:`~dynoqueue.RedisQueues`): the *quorum*
connection that writes and claims, on the primary, and the *non-quorum* connection for cheap
reads, on the local zone's replica. The builders here make both from addresses, with TLS
(``rediss``) and ACL users, and hand them to a :class:`RedisQueues` that owns them (closing the
factory closes them).

URL forms accepted by :func:`from_url` (``[user:password@]`` is an ACL user; password only is
the ``default`` user; query parameters go to redis-py, e.g. ``?ssl_ca_certs=/path/ca.pem``):

* ``redis://[user:password@]host:port[/db]``, ``rediss://...`` (TLS), ``unix:///path.sock``:
  one server, or the primary of a zone ring (give ``replica_urls`` for the zone replicas).
* ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]``, and
  ``rediss+sentinel://...``: a Sentinel deployment; the address list names the sentinels.
* ``redis+cluster://[user:password@]host:port[,host:port...]``, and ``rediss+cluster://...``:
  a Redis Cluster; any reachable nodes serve as startup nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection

from .clock import system_clock_ms
from .errors import ConfigurationError, RedisOperationError
from .sharding import SingleShardSupplier, ZoneShardSupplier

if TYPE_CHECKING:
    from .queues import RedisQueues

#: Shard of a deployment built without zones.
SINGLE_SHARD = "a"
#: Key prefix the builders use unless told otherwise.
DEFAULT_KEY_PREFIX = "dynoqueue"

_SINGLE_SCHEMES = ("redis", "rediss", "unix")
_SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# Query parameters redis-py's connection classes understand for TLS; others are refused so a
# typo does not silently turn TLS verification off.
_TLS_PARAMS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
               "ssl_check_hostname", "ssl_password", "ssl_min_version")
_OTHER_PARAMS = ("db", "socket_timeout", "socket_connect_timeout", "client_name")


@dataclass(frozen=True)
class RetryBudget:
    """How long a call keeps retrying a lost connection (a failover, a restart) before it fails.

    Attempts back off exponentially from ``base_s`` up to ``cap_s`` seconds; after ``retries``
    retries the error surfaces as a :class:`~dynoqueue.errors.RedisOperationError`. The
    defaults ride out a Sentinel failover with ``down-after-milliseconds`` up to ~5 s.

    Args:
        retries: retries after the first attempt, >= 0.
        base_s: first back-off, seconds, > 0.
        cap_s: longest single back-off, seconds, >= base_s.
    """

    retries: int = 12
    base_s: float = 0.05
    cap_s: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigurationError(f"retries must be an int >= 0, got {self.retries!r}")
        if not self.base_s > 0 or not self.cap_s >= self.base_s:
            raise ConfigurationError("back-off must satisfy 0 < base_s <= cap_s")

    def retry(self) -> Retry:
        """A redis-py :class:`~redis.retry.Retry` with this budget."""
        return Retry(ExponentialBackoff(cap=self.cap_s, base=self.base_s), self.retries)

    @property
    def worst_case_s(self) -> float:
        """Upper bound of the time spent backing off, seconds (socket timeouts not included)."""
        return float(sum(min(self.cap_s, self.base_s * 2**i) for i in range(self.retries)))


class _FollowingSentinelConnection(SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels again on *every* reconnect.

    redis-py 8.1 reconnects a dropped connection from ``send_packed_command`` through
    ``connect_check_health``, which skips the sentinel lookup that ``connect`` does; after a
    failover such a connection retries the dead primary's address until the retry budget
    runs out. Routing that path through ``connect`` makes every reconnect follow the primary.
    """

    _resolving = False

    def connect_check_health(self, check_health: bool = True,
                             retry_socket_connect: bool = True) -> None:
        if self._sock is None and not self._resolving:
            self._resolving = True
            try:
                self.connect()  # type: ignore[no-untyped-call]  # retry + sentinel lookup
                return
            finally:
                self._resolving = False
        super().connect_check_health(check_health=check_health,
                                     retry_socket_connect=retry_socket_connect)


class _FollowingSentinelSSLConnection(_FollowingSentinelConnection, SentinelManagedSSLConnection):
    """The same over TLS."""


@dataclass
class ParsedUrl:
    """A deployment URL taken apart (see the module docstring for the forms)."""

    kind: str  # "single" | "sentinel" | "cluster"
    url: str
    nodes: list[tuple[str, int]] = field(default_factory=list)
    service_name: str | None = None
    username: str | None = None
    password: str | None = None
    tls: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def parse_url(url: str) -> ParsedUrl:
    """Take a deployment URL apart.

    Returns:
        A :class:`ParsedUrl`; ``options`` holds the query parameters (db, TLS files, ...).

    Raises:
        ConfigurationError: unknown scheme, missing host/port/service name, bad port or an
            unknown query parameter.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"not a Redis URL: {url!r}")
    scheme = url.split("://", 1)[0].lower()
    if scheme in _SINGLE_SCHEMES:
        parts = urlsplit(url)
        return ParsedUrl("single", url, username=_unq(parts.username),
                         password=_unq(parts.password), tls=scheme == "rediss",
                         options=_query(parts.query))
    if scheme not in _SENTINEL_SCHEMES + _CLUSTER_SCHEMES:
        raise ConfigurationError(
            f"unknown URL scheme {scheme!r}: use redis, rediss, unix, redis+sentinel, "
            "rediss+sentinel, redis+cluster or rediss+cluster"
        )
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    userinfo, at, hosts_and_path = rest.rpartition("@")
    if not at:
        userinfo, hosts_and_path = "", rest
    hosts, _, path = hosts_and_path.partition("/")
    username = password = None
    if userinfo:
        user, colon, secret = userinfo.partition(":")
        username, password = (unquote(user) or None, unquote(secret)) if colon else (
            None, unquote(user))
    nodes = [_host_port(item, url) for item in hosts.split(",") if item]
    if not nodes:
        raise ConfigurationError(f"no host:port in {_redact(url)}")
    options = _query(query)
    parsed = ParsedUrl("cluster" if scheme in _CLUSTER_SCHEMES else "sentinel", url, nodes,
                       username=username, password=password,
                       tls=scheme.startswith("rediss"), options=options)
    segments = [unquote(s) for s in path.split("/") if s]
    if parsed.kind == "sentinel":
        if not segments:
            raise ConfigurationError(f"a sentinel URL names its service: "
                                     f"redis+sentinel://host:port/<service_name> ({_redact(url)})")
        parsed.service_name = segments[0]
        if len(segments) > 1:
            options.setdefault("db", segments[1])
    elif segments:
        raise ConfigurationError(f"a cluster URL has no path (Redis Cluster has only db 0): "
                                 f"{_redact(url)}")
    return parsed


def from_url(
    url: str,
    *,
    zones: Sequence[str] | None = None,
    local_zone: str | None = None,
    replica_urls: Mapping[str, str] | None = None,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    retry: RetryBudget | None = None,
    client_options: Mapping[str, Any] | None = None,
    read_from_replicas: bool = True,
    dynomite: bool = False,
    **settings: Any,
) -> RedisQueues:
    """Build a :class:`RedisQueues` for the deployment a URL names (see the module docstring).

    Sentinel and cluster URLs go to :func:`from_sentinel` and :func:`from_cluster`.

    Args:
        url: the deployment URL.
        zones: every availability zone; a zone's shard is the last character of its name, as
            dyno-queues' ``DynoShardSupplier`` (``us-east-1c`` -> ``c``). ``None``: one shard
            named ``"a"`` (or pass ``shard_supplier=`` for a custom mapping).
        local_zone: this process's zone (one of ``zones``); required with ``zones``.
        replica_urls: zone -> URL of that zone's replica. The local zone's entry becomes the
            non-quorum (read) connection; without one, reads go to the primary.
        key_prefix: prefix of every key.
        retry: how long calls retry a lost connection; default :class:`RetryBudget()`.
        client_options: extra keyword arguments for every redis-py client (e.g.
            ``{"decode_responses": True, "socket_timeout": 2.0}``).
        read_from_replicas: reads (the non-quorum connection) go to a replica: the local
            zone's from ``replica_urls``, Sentinel's replicas, or each Cluster slot's
            replicas. False reads from the primary too (read-your-writes, more load on it).
        dynomite: the Dynomite profile (``url`` is the local Dynomite node): dyno-queues v1's
            exact key layout (no hash tags), time from this process's clock (Dynomite has no
            ``TIME`` in scripts), no pub/sub doorbell and no ``WAIT``; Dynomite replicates
            across racks itself. See ``docs/deployments.md``.
        **settings: the remaining :class:`RedisQueues` arguments (``unack_timeout_ms``,
            ``write_quorum``, ...).

    Returns:
        A RedisQueues that owns its connections: :meth:`RedisQueues.close` closes them.

    Raises:
        ConfigurationError: a bad URL, zone list or setting.
        RedisOperationError: (cluster URLs only) no node could be reached or logged in to.
            Other deployments connect lazily: a wrong address or password shows up at the
            first call, as a RedisOperationError.
    """
    parsed = parse_url(url)
    if dynomite:
        settings = _dynomite_settings(parsed, settings)
    if parsed.kind == "sentinel":
        assert parsed.service_name is not None
        return from_sentinel(
            parsed.nodes, parsed.service_name, zones=zones, local_zone=local_zone,
            replica_urls=replica_urls, key_prefix=key_prefix, retry=retry,
            username=parsed.username, password=parsed.password, tls=parsed.tls,
            read_from_replicas=read_from_replicas,
            client_options={**parsed.options, **(client_options or {})}, **settings,
        )
    if parsed.kind == "cluster":
        if replica_urls:
            raise ConfigurationError("replica_urls does not apply to Redis Cluster: reads go "
                                     "to the replicas of each slot's primary")
        return from_cluster(url, zones=zones, local_zone=local_zone, key_prefix=key_prefix,
                            retry=retry, read_from_replicas=read_from_replicas,
                            client_options=client_options, **settings)
    supplier = _shard_supplier(zones, local_zone, settings)
    common = _client_options(client_options, retry)
    local = _replica_client(replica_urls, zones, local_zone, common, wanted=read_from_replicas)
    primary = redis.Redis.from_url(url, **common)
    return _build(primary, local or primary, [primary] + ([local] if local else []),
                  key_prefix=key_prefix, shard_supplier=supplier, **settings)


def from_sentinel(
    sentinels: Sequence[tuple[str, int]] | str,
    service_name: str,
    *,
    zones: Sequence[str] | None = None,
    local_zone: str | None = None,
    replica_urls: Mapping[str, str] | None = None,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    retry: RetryBudget | None = None,
    username: str | None = None,
    password: str | None = None,
    tls: bool = False,
    read_from_replicas: bool = True,
    sentinel_options: Mapping[str, Any] | None = None,
    client_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> RedisQueues:
    """Build a :class:`RedisQueues` on a Sentinel-managed primary and its replicas.

    The quorum connection is ``Sentinel.master_for(service_name)``: after a failover it asks
    the sentinels for the new primary, and calls in flight retry within ``retry``'s budget
    (a write that reaches the demoted primary gets READONLY, which also triggers the
    re-discovery). The non-quorum connection is the local zone's replica from
    ``replica_urls`` when given, else ``Sentinel.slave_for(service_name)`` (any replica,
    falling back to the primary when none is up).

    Args:
        sentinels: ``[(host, port), ...]`` of the sentinels, or ``"host:port,host:port"``.
        service_name: the monitored primary's name (``sentinel monitor <name> ...``).
        zones, local_zone, replica_urls, key_prefix, retry, client_options, **settings: as
            :func:`from_url`.
        read_from_replicas: False sends reads to the primary too (read-your-writes).
        username, password: ACL user of the data nodes (password only: the default user).
        tls: connect to the data nodes (and the sentinels) over TLS; TLS files go in
            ``client_options`` (``ssl_ca_certs``, ``ssl_certfile``, ...).
        sentinel_options: keyword arguments for the connections to the sentinels themselves
            (e.g. their own ``username``/``password``); default: the TLS settings of the
            data nodes and short timeouts.

    Returns:
        A RedisQueues that owns its connections.

    Raises:
        ConfigurationError: a bad sentinel list, zone list or setting.
    """
    if isinstance(sentinels, str):
        sentinels = [_host_port(item, sentinels) for item in sentinels.split(",") if item]
    sentinels = list(sentinels)
    if not sentinels:
        raise ConfigurationError("at least one sentinel address is needed")
    if not service_name:
        raise ConfigurationError("service_name must name the monitored primary")
    supplier = _shard_supplier(zones, local_zone, settings)
    common = _credentials(_client_options(client_options, retry), tls, username, password)
    tls_only = {k: v for k, v in common.items() if k == "ssl" or k in _TLS_PARAMS}
    # One quick try per sentinel: the data connection's retry budget already repeats the
    # whole discovery, and nested retries would multiply into minutes.
    to_sentinels = {"socket_timeout": 1.0, "socket_connect_timeout": 1.0,
                    "retry": Retry(NoBackoff(), 0), **tls_only, **(sentinel_options or {})}
    local = _replica_client(replica_urls, zones, local_zone, common, wanted=read_from_replicas)
    manager = Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs=to_sentinels, **common
    )
    following = _FollowingSentinelSSLConnection if tls else _FollowingSentinelConnection
    primary = manager.master_for(  # type: ignore[no-untyped-call]
        service_name, connection_class=following)
    if local is None:
        local = (manager.slave_for(  # type: ignore[no-untyped-call]
            service_name, connection_class=following) if read_from_replicas else primary)
    owned = [primary] + ([local] if local is not primary else [])
    return _build(primary, local, owned, key_prefix=key_prefix,
                  shard_supplier=supplier, **settings)


def from_cluster(
    nodes: str | Sequence[tuple[str, int]],
    *,
    zones: Sequence[str] | None = None,
    local_zone: str | None = None,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    retry: RetryBudget | None = None,
    read_from_replicas: bool = True,
    username: str | None = None,
    password: str | None = None,
    tls: bool = False,
    client_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> RedisQueues:
    """Build a :class:`RedisQueues` on a Redis Cluster (``redis.cluster.RedisCluster``).

    Keys carry a hash tag around the queue name (``P.QUEUE.{Q}.S``), so each queue lives in
    one slot and every script is single-slot, while different queues spread over the cluster.
    Writes and claims go to the slot's primary, and ``WAIT`` to that same primary. With
    ``read_from_replicas`` the non-quorum connection sends reads (peek, get, predicate scans,
    through ``EVALSHA_RO``) to the slot's replicas in turn.

    Args:
        nodes: a ``redis+cluster://``/``rediss+cluster://`` URL, a plain ``redis://`` URL of
            any node, or ``[(host, port), ...]`` startup nodes.
        read_from_replicas: send non-quorum reads to replicas (default True).
        username, password, tls: ACL user and TLS, when not in the URL.
        zones, local_zone, key_prefix, retry, client_options, **settings: as :func:`from_url`.

    Returns:
        A RedisQueues that owns its connections.

    Raises:
        ConfigurationError: a bad address, zone list or setting.
        RedisOperationError: no startup node could be reached or logged in to (RedisCluster
            reads the slot map when it is created).
    """
    supplier = _shard_supplier(zones, local_zone, settings)
    common = _client_options(client_options, retry)
    if isinstance(nodes, str):
        parsed = parse_url(nodes)
        if parsed.kind == "sentinel":
            raise ConfigurationError("from_cluster was given a sentinel URL")
        if parsed.kind == "single":
            host_port = urlsplit(nodes)
            if not host_port.hostname:
                raise ConfigurationError(f"a cluster node needs host:port: {_redact(nodes)}")
            parsed.nodes = [(host_port.hostname, host_port.port or 6379)]
            parsed.options.pop("db", None)
        startup = parsed.nodes
        username = parsed.username if parsed.username is not None else username
        password = parsed.password if parsed.password is not None else password
        tls = tls or parsed.tls
        common = {**parsed.options, **common}  # typed by _credentials below
    else:
        startup = [(str(h), int(p)) for h, p in nodes]
        if not startup:
            raise ConfigurationError("at least one cluster node is needed")
    common = _credentials(common, tls, username, password)
    retry_obj = common.pop("retry")
    common.pop("retry_on_error", None)
    startup_nodes = [ClusterNode(h, p) for h, p in startup]  # type: ignore[no-untyped-call]

    def cluster(**extra: Any) -> RedisCluster:
        # RedisCluster has its own retry around MOVED/ASK and failovers; give it our budget.
        # It reads the slot map at construction, so a wrong address or password shows here.
        try:
            return RedisCluster(startup_nodes=startup_nodes, retry=retry_obj, **common, **extra)
        except (redis.RedisError, RedisClusterException) as exc:
            raise RedisOperationError("connect", "", f"Redis Cluster at {startup}: {exc}") from exc

    primary = cluster()
    local = primary
    if read_from_replicas:
        try:
            local = cluster(load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS)
        except BaseException:
            primary.close()
            raise
    owned = [primary] + ([local] if local is not primary else [])
    return _build(primary, local, owned, key_prefix=key_prefix, shard_supplier=supplier,
                  **settings)


# ---------------------------------------------------------------------------------- helpers


def _dynomite_settings(parsed: ParsedUrl, settings: dict[str, Any]) -> dict[str, Any]:
    if parsed.kind != "single":
        raise ConfigurationError("the Dynomite profile takes the local node's redis:// URL")
    if parsed.tls or parsed.username or parsed.password:
        raise ConfigurationError("Dynomite supports neither TLS to clients nor AUTH; "
                                 "secure it at the network level")
    if settings.get("write_quorum", 0):
        raise ConfigurationError("Dynomite has no WAIT: replication across racks is its own "
                                 "(its consistency level); use write_quorum=0")
    if settings.get("hash_tag"):
        raise ConfigurationError("the Dynomite profile keeps dyno-queues' key layout: no "
                                 "hash tags")
    return {"hash_tag": False, "doorbell": False, "clock": system_clock_ms, **settings}


def _build(quorum: Any, non_quorum: Any, owned: list[Any], **settings: Any) -> RedisQueues:
    from .queues import RedisQueues

    try:
        queues = RedisQueues(quorum, non_quorum, **settings)
    except BaseException:
        for client in owned:
            client.close()
        raise
    queues.own_connections(owned)
    return queues


def _shard_supplier(
    zones: Sequence[str] | None, local_zone: str | None, settings: dict[str, Any]
) -> Any:
    supplier = settings.pop("shard_supplier", None)
    if supplier is not None:  # a custom supplier replaces the zone list
        if zones is not None or local_zone is not None:
            raise ConfigurationError("give either zones/local_zone or shard_supplier, not both")
        return supplier
    if zones is None:
        if local_zone is not None:
            raise ConfigurationError("local_zone needs zones (the list of every zone)")
        return SingleShardSupplier(SINGLE_SHARD)
    if local_zone is None:
        raise ConfigurationError("zones needs local_zone (this process's zone)")
    return ZoneShardSupplier.from_zone_suffix(list(zones), local_zone)


def _client_options(options: Mapping[str, Any] | None, retry: RetryBudget | None) -> dict[str, Any]:
    budget = retry if retry is not None else RetryBudget()
    common: dict[str, Any] = {
        "retry": budget.retry(),
        # ReadOnlyError: a write reached a primary that a failover just demoted.
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, ReadOnlyError],
        "socket_connect_timeout": 2.0,
        "health_check_interval": 10,
    }
    common.update(options or {})
    for key in common:
        if key in ("host", "port", "url", "startup_nodes"):
            raise ConfigurationError(f"client_options may not set {key!r}: it is in the address")
    return common


def _replica_client(
    replica_urls: Mapping[str, str] | None,
    zones: Sequence[str] | None,
    local_zone: str | None,
    common: Mapping[str, Any],
    *,
    wanted: bool,
) -> Any:
    """The local zone's replica client from ``replica_urls``, or None (none given, none for
    this zone, or replica reads not ``wanted``). ``replica_urls`` is checked in every case."""
    if not replica_urls:
        return None
    unknown = set(replica_urls) - set(zones or ())
    if unknown:
        raise ConfigurationError(f"replica_urls names zones not in zones: {sorted(unknown)}")
    url = replica_urls.get(local_zone or "")
    if url is None:
        return None
    if parse_url(url).kind != "single":
        raise ConfigurationError(f"a replica URL names one server: {_redact(url)}")
    return redis.Redis.from_url(url, **common) if wanted else None


def _query(query: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _TLS_PARAMS + _OTHER_PARAMS:
            raise ConfigurationError(
                f"unknown URL parameter {key!r}; known: {', '.join(_TLS_PARAMS + _OTHER_PARAMS)}"
            )
        options[key] = value
    return options


def _credentials(
    options: Mapping[str, Any], tls: bool, username: str | None, password: str | None
) -> dict[str, Any]:
    """Client options with TLS and the ACL user added (URL query values typed first)."""
    common = _typed(options)
    if tls:
        common["ssl"] = True
    if username is not None:
        common["username"] = username
    if password is not None:
        common["password"] = password
    return common


def _typed(options: Mapping[str, Any]) -> dict[str, Any]:
    """URL query values are text; convert the ones redis-py wants typed."""
    typed = dict(options)
    for key in ("db",):
        if isinstance(typed.get(key), str):
            typed[key] = int(typed[key])
    for key in ("socket_timeout", "socket_connect_timeout"):
        if isinstance(typed.get(key), str):
            typed[key] = float(typed[key])
    if isinstance(typed.get("ssl_check_hostname"), str):
        typed["ssl_check_hostname"] = typed["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return typed


def _host_port(item: str, context: str) -> tuple[str, int]:
    host, colon, port = item.strip().rpartition(":")
    if not colon or not host:
        raise ConfigurationError(f"expected host:port, got {item!r} in {_redact(context)}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigurationError(f"bad port {port!r} in {_redact(context)}") from None
    if not 0 < number < 65536:
        raise ConfigurationError(f"port out of range: {number} in {_redact(context)}")
    return host.strip("[]"), number


def _unq(value: str | None) -> str | None:
    return unquote(value) if value is not None else None


def _redact(url: str) -> str:
    """The URL with any password replaced, for error messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, tail = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{tail}"

"""Builders: the connections of a deployment, from a URL, a Sentinel service or a Redis Cluster.

Every deployment needs two connections (see :class:`~dynoqueue.RedisQueues`): the *quorum*
connection that writes and claims, on the primary, and the *non-quorum* connection for cheap
reads, on the local zone's replica. The builders make both from addresses, with TLS (``rediss``)
and ACL users, and hand them to the factory class they are given (``dynoqueue.RedisQueues`` or
``dynoqueue.asyncio.RedisQueues``), which then owns them: closing it closes them. The factory
classes call these builders from their ``from_url`` / ``from_sentinel`` / ``from_cluster``; this
module never imports them. URL forms: :mod:`dynoqueue.connect.urls`; the Dynomite profile:
:mod:`dynoqueue.connect.dynomite`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from redis.cluster import LoadBalancingStrategy
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.failures import refused
from ..errors import ConfigurationError, ConnectionFailedError, RedisOperationError
from ..model import validate
from ..model.settings import DEFAULT_CALL_TIMEOUT_MS, QueueOptions, check_call_timeout_ms
from ..model.sharding import ShardSupplier, SingleShardSupplier, ZoneShardSupplier
from .clients import ASYNC, SYNC, Flavor, RetryBudget
from .dynomite import dynomite_nodes, dynomite_profile
from .primary import PrimaryWatcher
from .urls import TLS_PARAMS, host_port, parse_url, redact_url, typed_options

#: Shard of a deployment built without zones.
SINGLE_SHARD = "a"
#: Key prefix the builders use unless told otherwise.
DEFAULT_KEY_PREFIX = "dynoqueue"

F = TypeVar("F")


class BuildSettings(QueueOptions, total=False):
    """The settings a builder passes on: the factory's (:class:`QueueOptions`) and, instead of
    ``zones``/``local_zone``, a custom ``shard_supplier``."""

    shard_supplier: ShardSupplier


# Long for its keywords and their docstring, the one reference of every builder keyword; the
# body is 30 lines.
def from_url(
    factory: Callable[..., F],
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
    **settings: Unpack[BuildSettings],
) -> F:
    """Build ``factory`` (a RedisQueues class) for the deployment a URL names.

    Sentinel and cluster URLs go to :func:`from_sentinel` and :func:`from_cluster`.

    Args:
        factory: ``dynoqueue.RedisQueues`` or ``dynoqueue.asyncio.RedisQueues``.
        url: the deployment URL (see :mod:`dynoqueue.connect.urls`).
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
        dynomite: the Dynomite profile. ``url`` is ``redis://host:port`` of the local node, or
            ``redis://h1:p1,h2:p2,...``: the local node first, then the nodes to fail over to,
            in order (each new connection takes the first that accepts it). The profile uses
            dyno-queues v1's exact key layout (no hash tags; pass ``hash_tag=True`` when a rack
            has several nodes and Dynomite has ``hash_tag: "{}"``), time from this process's
            clock (each rack's redis would evaluate its own ``TIME``), no pub/sub doorbell, no
            ``WAIT``, scripts sent as text (``eval_scripts``: a restarted rack has lost them),
            RESP2 and no ``CLIENT SETINFO`` (Dynomite closes the connection on commands it
            does not know). It refuses ``db`` other than 0, ``client_name``, TLS, credentials,
            ``write_quorum`` and Sentinel or Cluster URLs.
        **settings: the factory's settings (:class:`~dynoqueue.model.settings.QueueOptions`)
            and ``shard_supplier``.

    Returns:
        A factory that owns its connections: closing it closes them.

    Raises:
        ConfigurationError: a bad URL, zone list or setting.
        ConnectionFailedError: (cluster URLs only) no node could be reached.
        RedisOperationError: (cluster URLs only) no node could be logged in to.
            Other deployments connect lazily: ``ping()`` checks them at start-up.
    """
    node_options: dict[str, Any] = {}
    if dynomite:
        url, node_options = dynomite_nodes(url, _flavor(factory) is ASYNC)
    parsed = parse_url(url)
    if dynomite:
        settings, client_options = dynomite_profile(parsed, settings, client_options)
    if parsed.kind == "sentinel":
        assert parsed.service_name is not None
        return from_sentinel(
            factory, parsed.nodes, parsed.service_name, zones=zones, local_zone=local_zone,
            replica_urls=replica_urls, key_prefix=key_prefix, retry=retry,
            username=parsed.username, password=parsed.password, tls=parsed.tls,
            read_from_replicas=read_from_replicas,
            client_options={**parsed.options, **(client_options or {})}, **settings)
    if parsed.kind == "cluster":
        if replica_urls:
            raise ConfigurationError("replica_urls does not apply to Redis Cluster: reads go "
                                     "to the replicas of each slot's primary")
        return from_cluster(factory, url, zones=zones, local_zone=local_zone,
                            key_prefix=key_prefix, retry=retry,
                            read_from_replicas=read_from_replicas,
                            client_options=client_options, **settings)
    flavor = _flavor(factory)
    limit_s = _call_timeout_s(settings)
    supplier = _shard_supplier(zones, local_zone, settings)
    local = _replica_client(flavor, replica_urls, zones, local_zone, client_options, retry,
                            limit_s, wanted=read_from_replicas)
    primary = flavor.redis.from_url(url, **_options(flavor, client_options, retry, url,
                                                    limit_s), **node_options)
    return _build(factory, primary, local or primary, key_prefix, supplier, settings)


# Long for its keywords and their docstring (the Sentinel-specific ones); the body is 30 lines.
def from_sentinel(
    factory: Callable[..., F],
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
    **settings: Unpack[BuildSettings],
) -> F:
    """Build ``factory`` on a Sentinel-managed primary and its replicas.

    The quorum connection is ``Sentinel.master_for(service_name)``: after a failover it asks
    the sentinels for the new primary on every reconnect, and calls in flight retry within
    ``retry``'s budget (a write that reaches the demoted primary gets READONLY, which also
    triggers the re-discovery). A thread follows the sentinels' ``+switch-master`` events
    (:class:`~dynoqueue.connect.primary.PrimaryWatcher`), and a reply on the quorum connection
    counts only when it came from the primary they name: one from a demoted primary that is
    still writable is discarded, and the call retried on the current primary. The non-quorum
    connection is the local zone's replica from ``replica_urls`` when given, else
    ``Sentinel.slave_for(service_name)`` (any replica, falling back to the primary when none
    is up).

    Args:
        factory: ``dynoqueue.RedisQueues`` or ``dynoqueue.asyncio.RedisQueues``.
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
        A factory that owns its connections.

    Raises:
        ConfigurationError: a bad sentinel list, zone list or setting.
    """
    sentinels = _sentinel_addresses(sentinels)
    if not service_name:
        raise ConfigurationError("service_name must name the monitored primary")
    flavor = _flavor(factory)
    limit_s = _call_timeout_s(settings)
    supplier = _shard_supplier(zones, local_zone, settings)
    endpoint = f"sentinel service {service_name} via {_addresses(sentinels)}"
    common = _credentials(_options(flavor, client_options, retry, endpoint, limit_s), tls,
                          username, password)
    to_sentinels = _to_sentinels(flavor, common, sentinel_options, endpoint, limit_s)
    local = _replica_client(flavor, replica_urls, zones, local_zone, client_options, retry,
                            limit_s, wanted=read_from_replicas,
                            extra=_credentials({}, tls, username, password))
    manager = flavor.sentinel(sentinels, sentinel_kwargs=to_sentinels, **common)
    following = flavor.following_tls if tls else flavor.following
    # Replies on the quorum connection count only from the primary Sentinel names now.
    watcher = PrimaryWatcher(sentinels, service_name, {
        **to_sentinels, "retry": SYNC.make_retry(RetryBudget(retries=0), endpoint, limit_s)})
    primary = manager.master_for(service_name, connection_class=following,
                                 primary_watcher=watcher)
    if local is None:
        local = (manager.slave_for(service_name, connection_class=following)
                 if read_from_replicas else primary)
    queues = _build(factory, primary, local, key_prefix, supplier, settings)
    queues.own_connections([watcher])  # type: ignore[attr-defined]
    watcher.start()
    return queues


def from_cluster(
    factory: Callable[..., F],
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
    **settings: Unpack[BuildSettings],
) -> F:
    """Build ``factory`` on a Redis Cluster (``RedisCluster`` of redis-py or redis.asyncio).

    Keys carry a hash tag around the queue name (``P.QUEUE.{Q}.S``), so each queue lives in
    one slot and every script is single-slot, while different queues spread over the cluster.
    Writes and claims go to the slot's primary, and ``WAIT`` to that same primary. With
    ``read_from_replicas`` the non-quorum connection sends reads (peek, get, predicate scans,
    through ``EVALSHA_RO``) to the slot's replicas in turn.

    Args:
        factory: ``dynoqueue.RedisQueues`` or ``dynoqueue.asyncio.RedisQueues``.
        nodes: a ``redis+cluster://``/``rediss+cluster://`` URL, a plain ``redis://`` URL of
            any node, or ``[(host, port), ...]`` startup nodes.
        read_from_replicas: send non-quorum reads to replicas (default True).
        username, password, tls: ACL user and TLS, when not in the URL.
        zones, local_zone, key_prefix, retry, client_options, **settings: as :func:`from_url`.

    Returns:
        A factory that owns its connections.

    Raises:
        ConfigurationError: a bad address, zone list or setting.
        RedisOperationError: no startup node could be reached or logged in to (the sync
            RedisCluster reads the slot map when it is created; the asyncio one at first use).
    """
    flavor = _flavor(factory)
    limit_s = _call_timeout_s(settings)
    supplier = _shard_supplier(zones, local_zone, settings)
    startup, username, password, tls, query = _cluster_nodes(nodes, username, password, tls)
    endpoint = f"cluster {_addresses(startup)}"
    common = _credentials({**query, **_options(flavor, client_options, retry, endpoint,
                                                limit_s)}, tls, username, password)
    common.pop("retry_on_error", None)  # RedisCluster retries MOVED/ASK and failovers itself
    startup_nodes = [flavor.cluster_node(h, p) for h, p in startup]
    primary = _cluster_client(flavor, startup, startup_nodes, common)
    local = primary
    if read_from_replicas:
        local = _cluster_client(
            flavor, startup, startup_nodes, common,
            load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS)
    return _build(factory, primary, local, key_prefix, supplier, settings)


# ---------------------------------------------------------------------------------- helpers


def _sentinel_addresses(sentinels: Sequence[tuple[str, int]] | str) -> list[tuple[str, int]]:
    """The sentinels' addresses from a list or ``"host:port,host:port"``; at least one."""
    if isinstance(sentinels, str):
        sentinels = [host_port(item, sentinels) for item in sentinels.split(",") if item]
    sentinels = list(sentinels)
    if not sentinels:
        raise ConfigurationError("at least one sentinel address is needed")
    return sentinels


def _to_sentinels(flavor: Flavor, common: Mapping[str, Any],
                  sentinel_options: Mapping[str, Any] | None, endpoint: str,
                  limit_s: float) -> dict[str, Any]:
    """Options of the connections to the sentinels themselves: the data nodes' TLS settings,
    short timeouts, then the caller's ``sentinel_options`` (capped by the deadline)."""
    tls_only = {k: v for k, v in common.items() if k == "ssl" or k in TLS_PARAMS}
    # One quick try per sentinel: the data connection's retry budget already repeats the
    # whole discovery, and nested retries would multiply into minutes.
    quick_s = min(1.0, limit_s / 4)
    to_sentinels = {"socket_timeout": quick_s, "socket_connect_timeout": quick_s,
                    "retry": flavor.make_retry(RetryBudget(retries=0), endpoint, limit_s),
                    **tls_only, **(sentinel_options or {})}
    _cap_timeouts(to_sentinels, limit_s)
    return to_sentinels


def _cluster_nodes(
    nodes: str | Sequence[tuple[str, int]], username: str | None, password: str | None,
    tls: bool,
) -> tuple[list[tuple[str, int]], str | None, str | None, bool, dict[str, Any]]:
    """A cluster's startup nodes, user, password and TLS (a URL's win over the arguments),
    and the URL's query options."""
    if not isinstance(nodes, str):
        startup = [(str(h), int(p)) for h, p in nodes]
        if not startup:
            raise ConfigurationError("at least one cluster node is needed")
        return startup, username, password, tls, {}
    parsed = parse_url(nodes)
    if parsed.kind == "sentinel":
        raise ConfigurationError("from_cluster was given a sentinel URL")
    if parsed.kind == "single":
        if not parsed.nodes:
            raise ConfigurationError(f"a cluster node needs host:port: {redact_url(nodes)}")
        parsed.options.pop("db", None)
    return (parsed.nodes,
            parsed.username if parsed.username is not None else username,
            parsed.password if parsed.password is not None else password,
            tls or parsed.tls, parsed.options)


def _cluster_client(flavor: Flavor, startup: list[tuple[str, int]], startup_nodes: list[Any],
                    common: Mapping[str, Any], **extra: Any) -> Any:
    try:
        return flavor.cluster(startup_nodes=startup_nodes, **common, **extra)
    except (RedisError, RedisClusterException) as exc:
        if refused(exc):
            raise ConnectionFailedError(f"cluster {_addresses(startup)}", str(exc)) from exc
        raise RedisOperationError("connect", "", f"Redis Cluster at {startup}: {exc}") from exc


def _flavor(factory: Any) -> Flavor:
    return ASYNC if getattr(factory, "asynchronous", False) else SYNC


def _build(factory: Callable[..., F], quorum: Any, non_quorum: Any, key_prefix: str,
           supplier: ShardSupplier, settings: BuildSettings) -> F:
    owned = [quorum] + ([non_quorum] if non_quorum is not quorum else [])
    try:
        queues = factory(quorum, non_quorum, key_prefix=key_prefix,
                         shard_supplier=supplier, **settings)
    except BaseException:
        for client in owned:
            _close_quietly(client)
        raise
    queues.own_connections(owned)  # type: ignore[attr-defined]
    return queues


def _close_quietly(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is not None and not getattr(client, "aclose", None):
        close()
    # An asyncio client holds no socket before its first command: nothing to close here.


def _shard_supplier(zones: Sequence[str] | None, local_zone: str | None,
                    settings: BuildSettings) -> ShardSupplier:
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
    return ZoneShardSupplier.from_zone_suffix(
        validate.listed("zones must be a list of zone names", zones, error=ConfigurationError),
        local_zone)


def _call_timeout_s(settings: BuildSettings) -> float:
    """The deadline of one call, seconds (checked here: the clients' timeouts derive from it)."""
    return check_call_timeout_ms(settings.get("call_timeout_ms", DEFAULT_CALL_TIMEOUT_MS)) / 1000


def _cap_timeouts(options: dict[str, Any], limit_s: float) -> None:
    """No socket wait may outlast a call's deadline: a caller's ``socket_timeout`` or
    ``socket_connect_timeout`` that is None (wait forever) or longer is cut to it."""
    for key in ("socket_timeout", "socket_connect_timeout"):
        value = options.get(key)
        if value is None or (isinstance(value, (int, float)) and value > limit_s):
            options[key] = limit_s


def _options(flavor: Flavor, options: Mapping[str, Any] | None, retry: RetryBudget | None,
             endpoint: str, limit_s: float) -> dict[str, Any]:
    """Keyword arguments every client of a deployment gets: the retry budget (logging each
    retry with ``endpoint``, stopping at the call's deadline), the errors worth retrying,
    timeouts derived from the deadline ``limit_s``, then the caller's own (capped by it).

    A read may take the whole deadline, so a call waits out a stall shorter than its deadline
    (``CLIENT PAUSE`` in a failover, a slow script) and a frozen server fails it at the
    deadline; a read timeout is retried only while time is left (never a claim's). A connection
    may take a quarter (at most 2 s), so after a quick failure (a refused connection in a
    failover) there is still time for retries."""
    common: dict[str, Any] = {
        "retry": flavor.make_retry(retry if retry is not None else RetryBudget(),
                                   redact_url(endpoint), limit_s),
        # ReadOnlyError: a write reached a primary that a failover just demoted.
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, ReadOnlyError],
        "socket_connect_timeout": min(2.0, limit_s / 4),
        "socket_timeout": limit_s,
        "health_check_interval": 10,
    }
    common.update(options or {})
    _cap_timeouts(common, limit_s)
    for key in common:
        if key in ("host", "port", "url", "startup_nodes"):
            raise ConfigurationError(f"client_options may not set {key!r}: it is in the address")
    return common


def _replica_client(flavor: Flavor, replica_urls: Mapping[str, str] | None,
                    zones: Sequence[str] | None, local_zone: str | None,
                    client_options: Mapping[str, Any] | None, retry: RetryBudget | None,
                    limit_s: float, *, wanted: bool,
                    extra: Mapping[str, Any] | None = None) -> Any:
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
        raise ConfigurationError(f"a replica URL names one server: {redact_url(url)}")
    if not wanted:
        return None
    options = {**(extra or {}), **_options(flavor, client_options, retry, url, limit_s)}
    return flavor.redis.from_url(url, **options)


def _credentials(options: Mapping[str, Any], tls: bool, username: str | None,
                 password: str | None) -> dict[str, Any]:
    """Client options with TLS and the ACL user added (URL query values typed first)."""
    common = typed_options(dict(options))
    if tls:
        common["ssl"] = True
    if username is not None:
        common["username"] = username
    if password is not None:
        common["password"] = password
    return common


def _addresses(nodes: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{h}:{p}" for h, p in nodes)

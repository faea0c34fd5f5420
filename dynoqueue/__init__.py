"""dynoqueue: sharded, delayed, prioritised, at-least-once message queues on Redis.

A Python port of Netflix dyno-queues, storage-compatible with its v1 Java client.
"""

from .errors import (
    ConfigurationError,
    DynoQueueError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPatternError,
    PayloadTooLargeError,
    QueueClosedError,
    QuorumNotReachedError,
    RedisOperationError,
    RedisServerNotFoundError,
    RedisServerStartError,
)
from .message import Message
from .queue import DynoQueue
from .queues import RedisQueues
from .sharding import (
    LocalOnlyStrategy,
    RoundRobinStrategy,
    ShardingStrategy,
    ShardSupplier,
    SingleShardSupplier,
    StaticShardSupplier,
    ZoneShardSupplier,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "DynoQueue",
    "DynoQueueError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidPatternError",
    "LocalOnlyStrategy",
    "Message",
    "PayloadTooLargeError",
    "QueueClosedError",
    "QuorumNotReachedError",
    "RedisOperationError",
    "RedisQueues",
    "RedisServerNotFoundError",
    "RedisServerStartError",
    "RoundRobinStrategy",
    "ShardSupplier",
    "ShardingStrategy",
    "SingleShardSupplier",
    "StaticShardSupplier",
    "ZoneShardSupplier",
    "__version__",
]

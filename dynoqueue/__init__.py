"""dynoqueue: sharded, delayed, prioritised, at-least-once message queues on Redis.

A Python port of Netflix dyno-queues, storage-compatible with its v1 Java client.
"""

from .connect import RetryBudget
from .errors import (
    AccessDeniedError,
    CallTimeoutError,
    ConfigurationError,
    ConnectionFailedError,
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
from .model.message import Message
from .model.policy import QueuePolicy, RateLimit
from .model.sharding import (
    LocalOnlyStrategy,
    RoundRobinStrategy,
    ShardingStrategy,
    ShardSupplier,
    SingleShardSupplier,
    StaticShardSupplier,
    ZoneShardSupplier,
)
from .model.states import DeadLetter, MessageInfo, MessageState
from .model.stats import QueueStats
from .queue import DynoQueue
from .queues import RedisQueues
from .worker import Backoff, DeadLetterNow, Retry, Worker

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "Backoff",
    "CallTimeoutError",
    "ConfigurationError",
    "ConnectionFailedError",
    "DeadLetter",
    "DeadLetterNow",
    "DynoQueue",
    "DynoQueueError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidPatternError",
    "LocalOnlyStrategy",
    "Message",
    "MessageInfo",
    "MessageState",
    "PayloadTooLargeError",
    "QueueClosedError",
    "QueuePolicy",
    "QueueStats",
    "QuorumNotReachedError",
    "RateLimit",
    "RedisOperationError",
    "RedisQueues",
    "RedisServerNotFoundError",
    "RedisServerStartError",
    "Retry",
    "RetryBudget",
    "RoundRobinStrategy",
    "ShardSupplier",
    "ShardingStrategy",
    "SingleShardSupplier",
    "StaticShardSupplier",
    "Worker",
    "ZoneShardSupplier",
    "__version__",
]

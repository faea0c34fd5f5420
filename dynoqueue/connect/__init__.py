"""Connections: deployment URLs (:mod:`.urls`), redis-py client classes and the retry budget
(:mod:`.clients`), and the builders that make a deployment's clients (:mod:`.builders`).

The factories consume what the builders produce: ``RedisQueues.from_url`` (sync or asyncio)
calls :func:`dynoqueue.connect.builders.from_url` with its own class.
"""

from .builders import DEFAULT_KEY_PREFIX, SINGLE_SHARD
from .clients import RetryBudget
from .urls import ParsedUrl, parse_url, redact_url

__all__ = ["DEFAULT_KEY_PREFIX", "SINGLE_SHARD", "ParsedUrl", "RetryBudget", "parse_url",
           "redact_url"]

"""The app a real ``dramatiq tests.dramatiq_app_worker`` process runs in tests/test_dramatiq.py.

The one line an app changes to use dynoqueue is the broker below; the deployment comes from the
environment the test sets: ``DQ_URL``, ``DQ_PREFIX``, ``DQ_PARTITIONS``, ``DQ_ZONE`` (this
worker's zone of ``ZONES``), ``DQ_LEASE_MS`` and ``DQ_RECORDS_URL`` (where
the actors record what they did).
"""

from __future__ import annotations

import os

import dramatiq
import redis

from dynoqueue.dramatiq import DynoqueueBroker

from .dramatiq_app import ZONES, declare

broker = DynoqueueBroker(
    os.environ["DQ_URL"], zones=ZONES, local_zone=os.environ.get("DQ_ZONE", ZONES[0]),
    key_prefix=os.environ["DQ_PREFIX"], partitions=int(os.environ.get("DQ_PARTITIONS", "1")),
    lease_ms=int(os.environ.get("DQ_LEASE_MS", "30000")), read_from_replicas=False,
    orphan_shard_grace_ms=600, unack_handler_interval_ms=300)
dramatiq.set_broker(broker)
actors = declare(broker, redis.Redis.from_url(os.environ["DQ_RECORDS_URL"]))

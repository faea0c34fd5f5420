"""Move the messages a dramatiq RedisBroker still holds into a DynoqueueBroker.

Stop the RedisBroker's workers first (they give their prefetched messages back when they stop),
then run: ``python examples/dramatiq_migrate.py OLD_REDIS_URL NEW_URL QUEUE [QUEUE ...]``
(``--namespace`` if the RedisBroker was given one). Each message waiting in ``QUEUE`` or
delayed in ``QUEUE.DQ`` is enqueued on the new broker, with its id, a delayed one due at its
``eta``, then deleted from the old keys; the RedisBroker's dead letters (``QUEUE.XQ``) are left
where they are. Safe to run again: a message enqueued twice replaces itself (same id).
"""

from __future__ import annotations

import argparse
from typing import Any

import dramatiq
import redis

from dynoqueue.dramatiq import DynoqueueBroker


def move_messages(old: redis.Redis, namespace: str, queue_names: list[str],
                  new: DynoqueueBroker) -> int:
    """Move every waiting and delayed message of ``queue_names`` from a RedisBroker's keys
    (``{namespace}:{queue}.msgs``, ``{namespace}:{queue}.DQ.msgs``) to ``new``.

    Returns:
        How many messages were moved.
    """
    moved = 0
    for queue_name in queue_names:
        new.declare_queue(queue_name)
        for name in (queue_name, f"{queue_name}.DQ"):
            messages, ids = f"{namespace}:{name}.msgs", f"{namespace}:{name}"
            for key, data in old.hscan_iter(messages):
                message: dramatiq.Message[Any] = dramatiq.Message.decode(data)
                options = {k: v for k, v in message.options.items() if k != "redis_message_id"}
                new.enqueue(message._replace(options=options))  # an eta becomes its due time
                old.hdel(messages, key)
                old.lrem(ids, 0, key)
                moved += 1
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old_url")
    parser.add_argument("new_url")
    parser.add_argument("queues", nargs="+")
    parser.add_argument("--namespace", default="dramatiq")
    args = parser.parse_args()
    new = DynoqueueBroker(args.new_url)
    try:
        with redis.Redis.from_url(args.old_url) as old:
            print(f"moved {move_messages(old, args.namespace, args.queues, new)} messages")
    finally:
        new.close()


if __name__ == "__main__":
    main()

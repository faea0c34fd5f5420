"""The only code that exists twice: sending commands and waiting, sync and asyncio.

:mod:`dynoqueue.io.sync` blocks the calling thread (redis-py clients, a doorbell thread);
:mod:`dynoqueue.io.aio` awaits (redis.asyncio clients, a doorbell task). Both run the
operations of :mod:`dynoqueue.core` unchanged.
"""

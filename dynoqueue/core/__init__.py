"""The operations, written once for both APIs (the sans-IO pattern of h11/h2).

Each operation is a generator: it checks its input, packs script arguments, then *yields* I/O
requests (:mod:`dynoqueue.core.requests`) and receives their replies, or has the driver's error
thrown in at the yield; it decodes the replies and returns the result. The sync driver
(:mod:`dynoqueue.io.sync`) and the asyncio driver (:mod:`dynoqueue.io.aio`) run the same
generators, so validation, key names, retries, slot routing and the waiting-pop state machine
exist once; only sending commands and waiting differ.
"""

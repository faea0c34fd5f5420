"""The ops CLI: ``dynoqueue stats|peek|get|dead|redrive|remove|purge|top``.

Each subcommand reads or changes queues through the public sync API (``stats`` and ``top``:
``RedisQueues.stats()``), prints a table (rich, when installed) or, with
``--json``, machine-readable JSON, and fails with one line on stderr (no traceback) when Redis
cannot be reached, refuses the credentials, or the queue or message does not exist.

Modules: :mod:`.session` (the shared options, opening the factory, the one-line errors),
:mod:`.render` (tables and JSON), :mod:`.commands` (the subcommands), :mod:`.cli` (argparse).
"""

"""``python -m dynoqueue``: the same as the ``dynoqueue`` command (see :mod:`dynoqueue.cli`)."""

from dynoqueue.cli import main

raise SystemExit(main())

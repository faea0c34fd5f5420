#!/usr/bin/env python3
"""Print dynoqueue's pip extras as setup.cfg declares them (stdlib only: runs before any install).

Usage:
    tools/extras.py                        every extra, comma-separated ("bench,demo,dev,...");
                                           `make test` installs these, so a new extra in
                                           setup.cfg is tested with no Makefile edit
    tools/extras.py --requirements NAME    the requirements of extra NAME, one per line
                                           (tools/ensure-redis-server.sh installs 'embedded')
    tools/extras.py --oldest NAME          the core requirement NAME pinned to the lowest
                                           version setup.cfg admits ("redis==8.0"; the
                                           minimal-install test run uses it)

Exits non-zero, with a message on stderr, when setup.cfg, its [options.extras_require] section,
the extra NAME or a lower bound of the core requirement NAME is missing.
"""

from __future__ import annotations

import argparse
import configparser
import sys
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parent.parent / "setup.cfg"


def extras(setup_cfg: Path = SETUP_CFG) -> dict[str, list[str]]:
    """Read the extras of ``setup_cfg``.

    Returns:
        extra name -> its requirement strings, in file order.

    Raises:
        SystemExit: the file or its ``[options.extras_require]`` section is missing.
    """
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(setup_cfg, encoding="utf-8"):
        raise SystemExit(f"extras: {setup_cfg} not found")
    if not parser.has_section("options.extras_require"):
        raise SystemExit(f"extras: {setup_cfg} has no [options.extras_require] section")
    return {
        name: [line.strip() for line in value.splitlines() if line.strip()]
        for name, value in parser.items("options.extras_require")
    }


def oldest(name: str, setup_cfg: Path = SETUP_CFG) -> str:
    """The core requirement ``name`` pinned to its lower bound (``redis>=8.0`` -> ``redis==8.0``).

    Raises:
        SystemExit: ``name`` is not in install_requires, or has no ``>=`` bound.
    """
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(setup_cfg, encoding="utf-8")
    for line in parser.get("options", "install_requires", fallback="").splitlines():
        requirement, _, bound = line.strip().partition(">=")
        if requirement.strip().lower() == name.lower() and bound.strip():
            return f"{requirement.strip()}=={bound.split(',')[0].strip()}"
    raise SystemExit(f"extras: setup.cfg's install_requires has no '{name}>=...'")


def main(argv: list[str] | None = None) -> int:
    """Print every extra's name, or one extra's requirements; see the module docstring."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument("--requirements", metavar="NAME", help="print this extra's requirements")
    cli.add_argument("--oldest", metavar="NAME",
                     help="print core requirement NAME pinned to its lowest admitted version")
    args = cli.parse_args(argv)
    if args.oldest is not None:
        print(oldest(args.oldest))
        return 0
    declared = extras()
    if args.requirements is None:
        print(",".join(declared))
        return 0
    if args.requirements not in declared:
        known = ", ".join(declared)
        print(f"extras: setup.cfg has no extra {args.requirements!r} (it has: {known})",
              file=sys.stderr)
        return 2
    print("\n".join(declared[args.requirements]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

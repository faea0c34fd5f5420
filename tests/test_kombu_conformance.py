"""kombu's own generic transport suites, run against ``dynoqueue://`` with default options.

The suites are kombu's ``t/integration/common.py`` from the sdist of the installed kombu,
downloaded at test time with pip into a cache outside the checkout
(``$DYNOQUEUE_TEST_CACHE``, default ``~/.cache/dynoqueue-test``) and never committed. Wired as
kombu's ``t/integration/test_redis.py`` wires them for its Redis transport (fixtures
``connection`` and ``invalid_connection``), with the Redis priority order (0 first). Without
the download (no network) the module skips and says why; with ``CI`` set it fails instead.

Each test gets a freshly flushed redis-server of its own module, so the default key prefix
and options are used as they are.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

kombu = pytest.importorskip("kombu")

import dynoqueue.kombu  # noqa: E402,F401  (registers the dynoqueue:// schemes)
from dynoqueue.embedded import RedisServer, free_port, single  # noqa: E402
from dynoqueue.kombu import factories  # noqa: E402

CACHE = Path(os.environ.get("DYNOQUEUE_TEST_CACHE", Path.home() / ".cache" / "dynoqueue-test"))


def _load_common() -> ModuleType:
    """kombu's ``t/integration/common.py`` of the installed version, as a module (downloaded
    once; written with an atomic rename, so parallel test processes never see half a file)."""
    version = kombu.__version__
    target = CACHE / f"kombu-{version}-common.py"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 f"kombu=={version}", "-d", scratch],
                capture_output=True, text=True, timeout=300, check=False)
            sdist = Path(scratch) / f"kombu-{version}.tar.gz"
            if done.returncode != 0 or not sdist.exists():
                raise RuntimeError(f"pip download kombu=={version} failed: "
                                   f"{(done.stderr or done.stdout)[-500:]}")
            with tarfile.open(sdist) as archive:
                member = archive.extractfile(f"kombu-{version}/t/integration/common.py")
                if member is None:
                    raise RuntimeError(f"no t/integration/common.py in {sdist}")
                partial = Path(scratch) / "common.py"
                partial.write_bytes(member.read())
            os.replace(partial, target)
    spec = importlib.util.spec_from_file_location("kombu_integration_common", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    common = _load_common()
except Exception as exc:  # no network, no pip: skip unless CI insists
    if os.environ.get("CI"):
        raise
    pytest.skip(f"kombu's generic transport suites are not available: {exc}",
                allow_module_level=True)


@pytest.fixture(scope="module")
def kombu_server() -> Iterator[RedisServer]:
    """A redis-server of this module only, flushed before each test. kombu's suites leave
    some connections open (the transport's shared factories): closed with the server, so
    no reprocessor or doorbell outlives this module and retries a stopped server."""
    with single() as server:
        yield server
        factories.close_all()


@pytest.fixture
def connection(kombu_server: RedisServer) -> Any:
    """A Connection to ``dynoqueue://`` on an empty server, with default options."""
    client = kombu_server.client()
    client.flushall()
    client.close()
    host, port = kombu_server.address
    return kombu.Connection(f"dynoqueue://{host}:{port}/0")


@pytest.fixture
def invalid_connection() -> Any:
    """A Connection to a port nothing listens on."""
    return kombu.Connection(f"dynoqueue://127.0.0.1:{free_port()}/0",
                            transport_options={"call_timeout": 0.5})


class TestBasicFunctionality(common.BasicFunctionality):  # type: ignore[misc,name-defined]
    pass


class TestExchangeTypes(common.BaseExchangeTypes):  # type: ignore[misc,name-defined]
    pass


class TestTimeToLive(common.BaseTimeToLive):  # type: ignore[misc,name-defined]
    pass


class TestPriority(common.BasePriority):  # type: ignore[misc,name-defined]
    #: kombu's Redis transport order: the lower number first (dynoqueue's strict priority).
    PRIORITY_ORDER = "desc"


class TestMessage(common.BaseMessage):  # type: ignore[misc,name-defined]
    pass


class TestEventLoop(common.BaseEventLoop):  # type: ignore[misc,name-defined]
    pass

"""A real Spark standalone cluster on this machine: one master and N workers, each its own JVM,
their executors separate JVMs, as users of ``spark-submit --master spark://...`` run it.

``local[*]`` runs every task inside the driver's JVM; a standalone cluster ships the tasks (and
the data source's pickled reader and writer) to executor JVMs that start their own Python
workers, which is what a Spark deployment does. The scale benchmark and its test use it.

    >>> with StandaloneSpark(workers=2) as spark_cluster:
    ...     spark = spark_cluster.session("my-app")
    ...     spark.range(10).count()

The master and the workers run Spark's own classes (``org.apache.spark.deploy.master.Master``,
``...worker.Worker``) through the ``spark-class`` script that the pyspark wheel ships.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from ..errors import ConfigurationError

_LOCALHOST = "127.0.0.1"
_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's pick)."""
    with socket.socket() as probe:
        probe.bind((_LOCALHOST, 0))
        port: int = probe.getsockname()[1]
        return port


def spark_class() -> str:
    """The path of pyspark's ``spark-class`` launcher.

    Raises:
        ConfigurationError: pyspark is not installed or ships no ``bin/spark-class``.
    """
    try:
        import pyspark
    except ImportError as missing:
        raise ConfigurationError("a Spark cluster needs pyspark: pip install "
                                 "'dynoqueue[spark]'") from missing
    path = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    if not os.access(path, os.X_OK):
        raise ConfigurationError(f"pyspark ships no spark-class at {path}")
    return path


class StandaloneSpark:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1.

    Args:
        workers: worker processes, >= 1.
        cores_per_worker: cores each worker offers, >= 1.
        memory_per_worker: memory each worker offers (Spark's size syntax, e.g. ``"2g"``).
        start_timeout_s: how long the master and the workers may take to come up, s.

    Raises:
        ConfigurationError: a count below 1, or no Java or pyspark (at :meth:`start`).
    """

    def __init__(self, workers: int = 2, cores_per_worker: int = 1,
                 memory_per_worker: str = "2g", start_timeout_s: float = 60.0) -> None:
        if workers < 1 or cores_per_worker < 1:
            raise ConfigurationError("a Spark cluster needs workers >= 1 and cores >= 1")
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.ui_port = 0
        self._procs: list[subprocess.Popen[bytes]] = []
        self._dir = ""

    @property
    def url(self) -> str:
        """The master URL, ``spark://127.0.0.1:<port>``."""
        return f"spark://{_LOCALHOST}:{self.port}"

    def start(self) -> StandaloneSpark:
        """Start the master, then the workers; return once every worker has registered.

        Raises:
            ConfigurationError: no Java runtime or no pyspark.
            TimeoutError: the cluster did not come up within ``start_timeout_s``.
        """
        from .session import check_java

        check_java()
        launcher = spark_class()
        self._dir = tempfile.mkdtemp(prefix="dynoqueue-spark-cluster-")
        env = {**os.environ, "SPARK_LOCAL_IP": _LOCALHOST, "SPARK_LOG_DIR": self._dir,
               "SPARK_WORKER_DIR": self._dir, "PYSPARK_PYTHON": sys.executable}
        self.port, self.ui_port = _free_port(), _free_port()
        try:
            self._spawn([launcher, _MASTER, "--host", _LOCALHOST, "--port", str(self.port),
                         "--webui-port", str(self.ui_port)], env, "master")
            self._await(lambda state: True, "the master")
            for k in range(self.workers):
                self._spawn([launcher, _WORKER, "--host", _LOCALHOST,
                             "--cores", str(self.cores_per_worker),
                             "--memory", self.memory_per_worker,
                             "--webui-port", str(_free_port()),
                             "--work-dir", os.path.join(self._dir, f"work-{k}"), self.url],
                            env, f"worker-{k}")
            self._await(lambda state: int(state.get("aliveworkers", 0)) >= self.workers,
                        f"{self.workers} workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, argv: list[str], env: dict[str, str], name: str) -> None:
        log = open(os.path.join(self._dir, f"{name}.log"), "wb")
        self._procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))
        log.close()

    def state(self) -> dict[str, Any]:
        """The master's status as its web UI's ``/json/`` gives it (workers, cores, apps)."""
        with urllib.request.urlopen(f"http://{_LOCALHOST}:{self.ui_port}/json/",
                                    timeout=2) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def _await(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if ready(self.state()):
                    return
            if any(p.poll() is not None for p in self._procs):
                break
            time.sleep(0.3)
        raise TimeoutError(f"Spark standalone: {what} did not come up within "
                           f"{self.start_timeout_s:g} s (logs in {self._dir})")

    def session(self, app_name: str = "dynoqueue", conf: dict[str, str] | None = None) -> Any:
        """A SparkSession of this cluster (executors on the workers: one executor of
        ``cores_per_worker`` cores per worker), the ``dynoqueue`` format registered. One
        session per driver process, as Spark allows.

        Raises:
            ConfigurationError: as :func:`dynoqueue.spark.session.local_session`.
        """
        from .session import local_session

        settings = {"spark.executor.cores": str(self.cores_per_worker),
                    "spark.cores.max": str(self.cores_per_worker * self.workers),
                    "spark.executor.memory": "1g",
                    "spark.default.parallelism": str(self.cores_per_worker * self.workers),
                    **(conf or {})}
        return local_session(app_name, master=self.url, conf=settings)

    def stop(self) -> None:
        """Stop the workers and the master (SIGTERM, then SIGKILL) and remove their files."""
        for proc in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
        self._procs.clear()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

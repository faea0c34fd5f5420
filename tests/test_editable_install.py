"""A plain editable install (``pip install -e .``, what the Makefile runs) needs no setuptools
compat mode and prints no "compat editable mode is transitional" warning, and it still puts the
checkout on ``sys.path``: Spark's lookup of ``pyspark_*`` modules (``pkgutil.iter_modules``)
finds ``pyspark_dynoqueue``, and ``dynoqueue bench`` finds ``benchmarks/``. Installs a copy of
the checkout into a new virtualenv (setuptools from the index, as a user's pip gets it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "*.egg-info", "build", "dist", "__pycache__", ".*_cache", ".hypothesis",
    "bench-results", "spark-demo-output", "node_modules")


def test_the_makefile_installs_without_compat_mode() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "editable_mode" not in makefile


def test_a_plain_editable_install_puts_the_checkout_on_sys_path(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=_NOT_SOURCE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what pip installs
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=240)
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                           "--no-deps", "-v", "-e", str(checkout)], capture_output=True,
                          text=True, timeout=240, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "transitional" not in done.stdout + done.stderr
    probe = ("import pkgutil, importlib.util\n"
             "print(sorted(m.name for m in pkgutil.iter_modules() "
             "if m.name.startswith('pyspark_')))\n"
             "print(importlib.util.find_spec('benchmarks').origin)\n")
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path, env=env, check=True).stdout.splitlines()
    assert found[0] == "['pyspark_dynoqueue']"
    assert found[1] == str(checkout / "benchmarks" / "__init__.py")

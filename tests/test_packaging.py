"""`python -m build` makes a wheel and an sdist that carry everything and install cleanly.

Builds from a copy of the checkout (so the checkout gets no build/ or egg-info), the way a user
would: an isolated build (setuptools from the index) of the sdist, then of the wheel from the
unpacked sdist, so the wheel also proves that the sdist is complete. The wheel is then installed
into a new virtualenv without system site-packages (its dependencies from the index), and a
Python started outside the checkout imports it and reads the Lua scripts from the installed
files. Nothing here imports the checkout's dynoqueue.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest

from dynoqueue.scripts import load

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "dynoqueue"
#: Generous bounds for one pip or build step; they mostly wait on the package index.
STEP_TIMEOUT_S = 240
#: Checkout content that is neither source nor wanted in the copy that gets built.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "*.egg-info", "build", "dist", "__pycache__", ".*_cache", ".hypothesis",
    "bench-results", "spark-demo-output", "node_modules",
)


@dataclass(frozen=True)
class Built:
    """The two distributions `python -m build` wrote."""

    wheel: Path
    sdist: Path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command without PYTHONPATH (the checkout is not importable); fail with its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {done.returncode}\n"
                    f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    return done


def _package_files(pattern: str) -> set[str]:
    """Paths, relative to the checkout, of the package's files matching ``pattern``."""
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for path in PACKAGE.rglob(pattern)
        if "__pycache__" not in path.parts
    }


def _declared_extras() -> set[str]:
    """The extras setup.cfg declares, as tools/extras.py (and so `make test`) reads them."""
    spec = importlib.util.spec_from_file_location("_extras", REPO_ROOT / "tools" / "extras.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.extras())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    if importlib.util.find_spec("build") is None:
        pytest.fail("`python -m build` needs the 'build' package: pip install -e '.[dev]' "
                    "(make test installs it)")
    root = tmp_path_factory.mktemp("packaging")
    source = root / "src"
    shutil.copytree(REPO_ROOT, source, ignore=_NOT_SOURCE)
    out = root / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], cwd=root)
    wheels = sorted(out.glob("dynoqueue-*.whl"))
    sdists = sorted(out.glob("dynoqueue-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    yield Built(wheel=wheels[0], sdist=sdists[0])


def test_wheel_holds_the_package_its_data_and_nothing_else(built: Built) -> None:
    lua = _package_files("*.lua")
    assert len(lua) >= 10, f"expected the Lua scripts under dynoqueue/, found {sorted(lua)}"
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()

    missing = (lua | _package_files("*.py") | {"dynoqueue/py.typed", "pyspark_dynoqueue.py"})
    missing -= names
    assert not missing, f"the wheel lacks {sorted(missing)}"
    top_level = {name.split("/")[0] for name in names} - {dist_info}
    assert top_level == {"dynoqueue", "pyspark_dynoqueue.py"}, top_level

    assert metadata["Requires-Python"] == ">=3.11"
    assert set(metadata.get_all("Provides-Extra") or []) == _declared_extras()
    requires = metadata.get_all("Requires-Dist") or []
    core = sorted(r for r in requires if "extra ==" not in r)
    assert [r.split(">")[0].strip() for r in core] == ["cronsim", "orjson", "redis"], core
    assert "dynoqueue = dynoqueue.cli:main" in entry_points


def test_sdist_holds_everything_a_build_needs(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    wanted = (_package_files("*.lua") | _package_files("*.py")
              | {"dynoqueue/py.typed", "pyspark_dynoqueue.py", "setup.cfg", "pyproject.toml",
                 "README.md", "MANIFEST.in"})
    assert not wanted - names, f"the sdist lacks {sorted(wanted - names)}"
    # MANIFEST.in prunes the tests: they need the whole checkout, so none ship at all.
    assert not {name for name in names if name.startswith("tests/")}


def test_wheel_installs_into_a_clean_venv_and_reads_its_scripts(
    built: Built, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)  # no system site-packages
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", str(built.wheel)], cwd=tmp_path)

    probe = textwrap.dedent("""
        import json
        from importlib import resources
        import dynoqueue, dynoqueue.scripts
        folder = resources.files(dynoqueue.scripts)
        scripts = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()
                   if p.name.endswith(".lua")}
        # Each script as it is sent: its lib/ includes resolved from the installed files.
        loaded = {name: s.text for name, s in dynoqueue.scripts.load().items()}
        print(json.dumps({"file": dynoqueue.__file__, "version": dynoqueue.__version__,
                          "queues": dynoqueue.RedisQueues.__name__, "scripts": scripts,
                          "loaded": loaded}))
    """)
    # cwd is tmp_path and PYTHONPATH is unset: only the venv's install can be imported.
    seen = json.loads(_run([str(python), "-c", probe], cwd=tmp_path).stdout)

    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    assert Path(seen["file"]).resolve().is_relative_to(site_packages.resolve()), seen["file"]
    assert built.wheel.name.startswith(f"dynoqueue-{seen['version']}-")
    assert seen["queues"] == "RedisQueues"
    source_scripts = PACKAGE / "scripts"
    assert set(seen["scripts"]) == {p.name for p in source_scripts.glob("*.lua")}
    for name, text in seen["scripts"].items():
        assert text == (source_scripts / name).read_text(encoding="utf-8"), name
    assert seen["loaded"] == {name: s.text for name, s in load().items()}

    # The console script from the entry point runs; its help lists the demo command.
    helped = _run([str(venv / "bin" / "dynoqueue"), "--help"], cwd=tmp_path)
    assert "demo" in helped.stdout

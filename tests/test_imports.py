"""The package's imports run one way: tools/import_graph.py --check passes (no upward edge,
no cycle, no sideways edge between products that its allowlist does not name and explain)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_imports_run_one_way() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "import_graph.py"), "--check"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upward edges: 0" in done.stdout
    assert "cycles: 0" in done.stdout

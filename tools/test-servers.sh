#!/usr/bin/env bash
# The server matrix: the contract (both APIs), lifecycle, ordering, Worker and fault suites once
# more on each other server found, where the main run used the default redis-server:
#   - every path in $DYNOQUEUE_TEST_SERVERS (comma-separated: a Valkey or Redis build of your
#     own, e.g. /opt/valkey-8.1/bin/valkey-server,/opt/redis-7.4/bin/redis-server);
#   - valkey-server from the distribution (Debian 13 ships it; installed here as root when the
#     package exists and DYNOQUEUE_NO_INSTALL is unset).
# Where none is found it says so and exits 0 (the matrix is skipped, not failed).
#
# Usage: tools/test-servers.sh [PYTHON]   (default .venv/bin/python; `make test` runs it)
set -euo pipefail

cd "$(dirname "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")")"
python=${1:-.venv/bin/python}

if ! command -v valkey-server >/dev/null && [[ $(id -u) == 0 && -z "${DYNOQUEUE_NO_INSTALL:-}" ]] \
        && command -v apt-cache >/dev/null \
        && apt-cache policy valkey-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "tools/test-servers.sh: installing Debian's valkey-server for the server matrix"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valkey-server \
        >/dev/null || echo "tools/test-servers.sh: valkey-server did not install; skipped"
fi

default=$("$python" -c 'from dynoqueue.embedded import find_redis_server as f; print(f())')
servers=()
IFS=',' read -r -a named <<<"${DYNOQUEUE_TEST_SERVERS:-}"
for server in "${named[@]}" "$(command -v valkey-server || true)"; do
    [[ -n $server ]] || continue
    if [[ ! -x $server ]]; then
        echo "tools/test-servers.sh: $server (from DYNOQUEUE_TEST_SERVERS) is not executable" >&2
        exit 1
    fi
    [[ $(readlink -f "$server") == $(readlink -f "$default") ]] || servers+=("$server")
done
if (( ${#servers[@]} == 0 )); then
    echo "server matrix skipped: no other server found (set DYNOQUEUE_TEST_SERVERS to Valkey" \
         "or Redis builds, comma-separated; Debian 13's valkey-server is used where installed)"
    exit 0
fi

suites=(tests/test_queue_api.py tests/test_bad_input.py tests/test_concurrency.py
        tests/test_state_machine.py tests/test_lifecycle.py tests/test_conductor.py
        tests/test_ordering.py tests/test_worker.py tests/test_faults.py)
status=0
for server in "${servers[@]}"; do
    echo "== server matrix: $("$server" --version) =="
    # Dynomite fronts the distribution's redis-server, and is not what this matrix is about.
    # By default the contract suite runs on single, managed and cluster (the zone ring and
    # Sentinel add replication, which the fault suite covers): ~3 min a server, so make test
    # stays near 15 min on Debian 13; DYNOQUEUE_MATRIX_DEPLOYMENTS=single,...,sentinel widens it.
    DYNOQUEUE_REDIS_SERVER=$server \
    DYNOQUEUE_TEST_DEPLOYMENTS=${DYNOQUEUE_MATRIX_DEPLOYMENTS:-single,managed,cluster} \
        "$python" -m pytest -p no:cacheprovider -q "${suites[@]}" || status=1
done
exit "$status"

#!/usr/bin/env bash
# Make sure a Chromium exists for the dashboard's browser test (tests/test_dashboard.py drives it
# headless with Playwright; no browser is downloaded): $DYNOQUEUE_CHROMIUM, then PATH, then
# Debian's chromium via apt-get when running as root; otherwise say what to install.
set -euo pipefail

if [[ -n "${DYNOQUEUE_CHROMIUM:-}" && -x "${DYNOQUEUE_CHROMIUM}" ]]; then
    found="$DYNOQUEUE_CHROMIUM"
elif command -v chromium >/dev/null; then
    found="$(command -v chromium)"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "ensure-chromium: no chromium found; installing Debian's chromium" >&2
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    found="$(command -v chromium)"
else
    echo "ensure-chromium: the dashboard test needs a Chromium and none was found." >&2
    echo "  Install one, e.g. 'sudo apt-get install chromium', or set DYNOQUEUE_CHROMIUM to its path." >&2
    exit 1
fi
echo "ensure-chromium: using $found"

#!/usr/bin/env bash
# Make sure a Chromium exists for the dashboard's browser test (tests/test_dashboard.py drives it
# headless with Playwright; no browser is downloaded): $DYNOQUEUE_CHROMIUM, then PATH, then
# Debian's chromium via apt-get when running as root; otherwise say what to install.
set -euo pipefail

found="$("$(dirname "${BASH_SOURCE[0]}")/find-or-install.sh" ensure-chromium \
    "${DYNOQUEUE_CHROMIUM:-}" chromium chromium \
    "the dashboard test needs a Chromium and none was found. Install one, e.g. 'sudo apt-get install chromium', or set DYNOQUEUE_CHROMIUM to its path.")"
echo "ensure-chromium: using $found"

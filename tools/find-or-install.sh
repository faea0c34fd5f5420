#!/usr/bin/env bash
# Print the path of a program the tests need: CHOSEN if it is an executable (a path from the
# user's environment), else COMMAND on PATH, else, as root with apt-get, COMMAND after
# installing Debian's PACKAGE; otherwise print ADVICE and exit 1. apt-get's output goes to
# stderr, so stdout is the path alone.
#
# Usage: tools/find-or-install.sh LABEL CHOSEN COMMAND PACKAGE ADVICE
set -euo pipefail

label="$1" chosen="$2" command="$3" package="$4" advice="$5"
if [[ -n "$chosen" && -x "$chosen" ]]; then
    echo "$chosen"
elif command -v "$command" >/dev/null; then
    command -v "$command"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "$label: no $command found; installing Debian's $package" >&2
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >&2
    command -v "$command"
else
    echo "$label: $advice" >&2
    exit 1
fi

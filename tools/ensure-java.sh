#!/usr/bin/env bash
# Make sure a Java runtime (17 or newer) exists for Spark: JAVA_HOME, then PATH, then Debian's
# openjdk-17-jre-headless via apt-get when running as root; otherwise say what to install.
set -euo pipefail

java_bin="$("$(dirname "${BASH_SOURCE[0]}")/find-or-install.sh" ensure-java \
    "${JAVA_HOME:+$JAVA_HOME/bin/java}" java openjdk-17-jre-headless \
    "Spark needs a Java 17 (or 21) runtime and none was found. Install one, e.g. 'sudo apt-get install openjdk-17-jre-headless', or set JAVA_HOME.")"

# 'java -version' prints e.g.: openjdk version "17.0.15" 2025-04-15
major="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
if [[ -z "$major" || "$major" -lt 17 ]]; then
    echo "ensure-java: $java_bin is Java ${major:-unknown}; Spark 4 needs 17 or newer." >&2
    echo "  Install openjdk-17-jre-headless or point JAVA_HOME at a Java 17+." >&2
    exit 1
fi
echo "ensure-java: using $java_bin (Java $major)"

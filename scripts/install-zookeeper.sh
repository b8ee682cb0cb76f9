#!/usr/bin/env bash
# Installs what the tests and the demo need to run a real ZooKeeper: the
# distribution's zookeeper package (ZooKeeper 3.8 and a Java runtime).
# Idempotent: it does nothing when ZooKeeper is already there.
set -euo pipefail

have_zookeeper() {
  command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] || return 1
  [ -n "${ZOOKEEPER_CLASSPATH:-}" ] && return 0
  [ -n "${ZOOKEEPER_HOME:-}" ] && ls "$ZOOKEEPER_HOME"/lib/*.jar >/dev/null 2>&1 && return 0
  [ -f /usr/share/java/zookeeper.jar ]
}

if have_zookeeper; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  cat >&2 <<'MSG'
install-zookeeper: this is not a Debian or Ubuntu machine, so install by hand:
  - a Java runtime (17 or newer), and
  - Apache ZooKeeper 3.8 or newer, unpacked anywhere;
then export ZOOKEEPER_HOME=/path/to/apache-zookeeper-3.8.x-bin
(or ZOOKEEPER_CLASSPATH=<its jars joined by ':'>) and run the command again.
MSG
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-zookeeper: need root to run apt-get (no sudo found)" >&2; exit 1
  fi
fi

echo "install-zookeeper: installing the distribution's zookeeper package" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show zookeeper >/dev/null 2>&1; then
  $SUDO apt-get update -qq
fi
$SUDO apt-get install -y -qq --no-install-recommends zookeeper >/dev/null || {
  # A stale package list is the usual reason: refresh once and retry.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends zookeeper >/dev/null
}
have_zookeeper || { echo "install-zookeeper: zookeeper installed but /usr/share/java/zookeeper.jar is missing" >&2; exit 1; }
echo "install-zookeeper: ready ($(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo unknown))" >&2

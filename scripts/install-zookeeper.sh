#!/usr/bin/env bash
# Installs what the tests and the demo need to run a real ZooKeeper: the
# distribution's zookeeper package (ZooKeeper 3.8 and a Java runtime).
# With --curator (make zookeeper, which the tests use) also Apache
# Curator's x-discovery client (libcurator-discovery-java, 5.4.0 on Debian
# 12), which the compatibility tests run as a Spring service would.
# Idempotent: it does nothing when what it is asked for is there.
set -euo pipefail

have_zookeeper() {
  command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] || return 1
  [ -n "${ZOOKEEPER_CLASSPATH:-}" ] && return 0
  [ -n "${ZOOKEEPER_HOME:-}" ] && ls "$ZOOKEEPER_HOME"/lib/*.jar >/dev/null 2>&1 && return 0
  [ -f /usr/share/java/zookeeper.jar ]
}

# Curator is a test dependency only: the demo does without it
# (testutil.NewCurator names this script when it is missing).
curator=""
[ "${1:-}" = "--curator" ] && curator=1
curator_jar=/usr/share/java/curator-x-discovery.jar
have_curator() { [ -z "$curator" ] || [ -f "$curator_jar" ] || [ -n "${CURATOR_CLASSPATH:-}" ] || ! command -v apt-get >/dev/null 2>&1; }

if have_zookeeper && have_curator; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  cat >&2 <<'MSG'
install-zookeeper: this is not a Debian or Ubuntu machine, so install by hand:
  - a Java runtime (17 or newer), and
  - Apache ZooKeeper 3.8 or newer, unpacked anywhere;
then export ZOOKEEPER_HOME=/path/to/apache-zookeeper-3.8.x-bin
(or ZOOKEEPER_CLASSPATH=<its jars joined by ':'>) and run the command again.
For the tests, also Apache Curator 5's curator-x-discovery with its
dependencies: export CURATOR_CLASSPATH=<those jars joined by ':'>.
MSG
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-zookeeper: need root to run apt-get (no sudo found)" >&2; exit 1
  fi
fi

pkgs="zookeeper${curator:+ libcurator-discovery-java}"
echo "install-zookeeper: installing the distribution's packages: $pkgs" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # $pkgs is a list
if ! apt-cache show $pkgs >/dev/null 2>&1; then
  $SUDO apt-get update -qq
fi
# shellcheck disable=SC2086 # $pkgs is a list
$SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null || {
  # A stale package list is the usual reason: refresh once and retry.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
}
have_zookeeper || { echo "install-zookeeper: zookeeper installed but /usr/share/java/zookeeper.jar is missing" >&2; exit 1; }
[ -z "$curator" ] || [ -f "$curator_jar" ] || { echo "install-zookeeper: libcurator-discovery-java installed but $curator_jar is missing" >&2; exit 1; }
echo "install-zookeeper: ready ($(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo unknown))" >&2

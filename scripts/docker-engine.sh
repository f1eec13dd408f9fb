#!/usr/bin/env bash
# A Docker engine for `make image-cpu` and `make test`, on a fresh Debian machine too.
#   docker-engine.sh start   install Debian's docker.io when there is no dockerd, and start
#                            dockerd when no engine answers; the pid of one started here
#                            goes to build/dockerd.pid
#   docker-engine.sh stop    stop the dockerd started here (by that pid), none other
# The classic builder is used (BuildKit is not in Debian 12): DOCKER_BUILDKIT=0.
set -euo pipefail
cd "$(dirname "$0")/.."
pidfile=build/dockerd.pid
log=build/dockerd.log
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

start() {
  if engine_answers; then
    return 0
  fi
  if ! command -v dockerd >/dev/null; then
    command -v apt-get >/dev/null || { echo "docker-engine: install Docker's engine (dockerd)" >&2; exit 1; }
    echo "docker-engine: installing Debian's docker.io" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      docker.io >/dev/null
  fi
  command -v docker >/dev/null || { echo "docker-engine: no docker client" >&2; exit 1; }
  mkdir -p build
  echo "docker-engine: starting dockerd (log: $log)" >&2
  # setsid: its own session, so that a terminal's Ctrl-C on make does not reach it
  $sudo setsid dockerd >"$log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  for _ in $(seq 1 60); do
    engine_answers && { echo "docker-engine: dockerd $(cat "$pidfile") is up" >&2; return 0; }
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 1
  done
  echo "docker-engine: dockerd did not start; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

stop() {
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    $sudo kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { echo "docker-engine: dockerd $pid did not stop" >&2; exit 1; }
    echo "docker-engine: stopped dockerd $pid" >&2
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

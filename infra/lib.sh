# Shared shell helpers of the infra scripts: state layout, logging, waiting for ports.
# shellcheck shell=bash
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The same variables (and defaults) as runtime/settings.py, where they are documented.
TURNSTREAM_HOME="${TURNSTREAM_HOME:-$HOME/.turnstream}"
KAFKA_BOOTSTRAP="${TURNSTREAM_KAFKA_BOOTSTRAP:-127.0.0.1:19092}"
REDIS_URL="${TURNSTREAM_REDIS_URL:-redis://127.0.0.1:16379/0}"
KAFKA_FIRST_SERVER="${KAFKA_BOOTSTRAP%%,*}"
KAFKA_PORT="${KAFKA_FIRST_SERVER##*:}"
KAFKA_REPLICATION_FACTOR="${TURNSTREAM_KAFKA_REPLICATION_FACTOR:-1}"
REDIS_PORT="$(sed -E 's#^redis://([^@]*@)?[^:/]+:([0-9]+).*#\2#' <<< "$REDIS_URL")"
PYTHON="$REPO_ROOT/.venv/bin/python"
mkdir -p "$TURNSTREAM_HOME"/{logs,run,cache}

log() { printf '[turnstream %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pid_alive PIDFILE: true when the pidfile names a running process.
pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_for DESCRIPTION SECONDS COMMAND...: poll COMMAND every 0.2 s until it succeeds.
wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    if ((SECONDS >= deadline)); then return 1; fi
    sleep 0.2
  done
  log "$what ready"
}

# stop_pidfile NAME PIDFILE: TERM, wait up to 20 s, then KILL.
stop_pidfile() {
  local name="$1" pidfile="$2"
  if ! pid_alive "$pidfile"; then rm -f "$pidfile"; log "$name not running"; return 0; fi
  local pid; pid="$(cat "$pidfile")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then log "$name did not stop, killing"; kill -9 "$pid" || true; fi
  rm -f "$pidfile"
  log "$name stopped"
}

#!/usr/bin/env bash
# Redis (Debian's redis-server) on 127.0.0.1. Usage: infra/redis/redis.sh start|stop|status
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PIDFILE="$TURNSTREAM_HOME/run/redis.pid"
DATA="$TURNSTREAM_HOME/redis"

start() {
  if pid_alive "$PIDFILE"; then log "Redis already running (pid $(cat "$PIDFILE"))"; return 0; fi
  command -v redis-server >/dev/null || die "redis-server not found (run infra/setup.sh)"
  if port_open "$REDIS_PORT"; then die "port $REDIS_PORT is taken by another process"; fi
  mkdir -p "$DATA"
  log "starting Redis on 127.0.0.1:$REDIS_PORT"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DATA" --daemonize yes \
    --pidfile "$PIDFILE" --logfile "$TURNSTREAM_HOME/logs/redis.log" \
    --save "" --appendonly yes --appendfsync everysec --protected-mode yes
  wait_for "Redis" 20 port_open "$REDIS_PORT" || die "Redis did not start"
}

stop() { stop_pidfile Redis "$PIDFILE"; }

status() {
  if pid_alive "$PIDFILE"; then echo "redis: running (pid $(cat "$PIDFILE"), 127.0.0.1:$REDIS_PORT)"
  else echo "redis: stopped"; return 1; fi
}

case "${1:-}" in
  start|stop|status) "$1" ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac

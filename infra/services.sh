#!/usr/bin/env bash
# The local services: Kafka (+ topics from the registry), Redis, ClickHouse migrations.
# Usage: infra/services.sh start|stop|status     (idempotent; state in $TURNSTREAM_HOME)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start() {
  "$REPO_ROOT/infra/redis/redis.sh" start
  "$REPO_ROOT/infra/kafka/kafka.sh" start
  log "creating topics from schemas/topics.py"
  "$PYTHON" -m runtime.kafka_topics
  log "applying ClickHouse migrations"
  "$PYTHON" -m runtime.clickhouse.migrate
}

stop() {
  "$REPO_ROOT/infra/kafka/kafka.sh" stop
  "$REPO_ROOT/infra/redis/redis.sh" stop
}

status() {
  local rc=0
  "$REPO_ROOT/infra/redis/redis.sh" status || rc=1
  "$REPO_ROOT/infra/kafka/kafka.sh" status || rc=1
  return $rc
}

case "${1:-}" in
  start|stop|status) cd "$REPO_ROOT"; "$1" ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac

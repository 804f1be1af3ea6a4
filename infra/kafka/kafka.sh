#!/usr/bin/env bash
# Apache Kafka, one KRaft node on 127.0.0.1, from jars resolved on Maven Central.
# Usage: infra/kafka/kafka.sh fetch|start|stop|status|reset   (idempotent)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KAFKA_DIR="$REPO_ROOT/infra/kafka"
KAFKA_VERSION="$(tr -d '[:space:]' < "$KAFKA_DIR/VERSION")"
LIBS="$TURNSTREAM_HOME/cache/kafka-$KAFKA_VERSION/libs"
DATA="$TURNSTREAM_HOME/kafka/data"
CONF="$TURNSTREAM_HOME/kafka/server.properties"
PIDFILE="$TURNSTREAM_HOME/run/kafka.pid"
LOGFILE="$TURNSTREAM_HOME/logs/kafka.log"

fetch() {
  if [[ -f "$LIBS/.complete" ]]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found (Java 17 + Maven are needed to fetch Kafka)"
  log "resolving Kafka $KAFKA_VERSION and its dependencies from Maven Central"
  rm -rf "$LIBS"; mkdir -p "$LIBS"
  mvn -B -q -Dstyle.color=never -f "$KAFKA_DIR/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIBS"
  touch "$LIBS/.complete"
  log "Kafka jars cached in $LIBS ($(ls "$LIBS" | wc -l) files)"
}

render_config() {
  mkdir -p "$DATA"
  sed -e "s#@PORT@#$KAFKA_PORT#g" -e "s#@CONTROLLER_PORT@#$KAFKA_CONTROLLER_PORT#g" \
      -e "s#@DATA_DIR@#$DATA#g" "$KAFKA_DIR/server.properties.template" > "$CONF"
}

JAVA_ARGS=(-Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties" -cp "$LIBS/*")

format_storage() {
  if [[ -f "$DATA/meta.properties" ]]; then return 0; fi
  local cluster_id
  cluster_id="$(python3 -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
  log "formatting KRaft storage (cluster $cluster_id)"
  java "${JAVA_ARGS[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$CONF" >> "$LOGFILE" 2>&1
}

broker_ready() { grep -q "Kafka Server started" "$LOGFILE" 2>/dev/null && port_open "$KAFKA_PORT"; }

start() {
  if pid_alive "$PIDFILE"; then log "Kafka already running (pid $(cat "$PIDFILE"))"; return 0; fi
  if port_open "$KAFKA_PORT"; then die "port $KAFKA_PORT is taken by another process"; fi
  fetch; render_config; : > "$LOGFILE"; format_storage
  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT"
  nohup java "${JAVA_ARGS[@]}" kafka.Kafka "$CONF" >> "$LOGFILE" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  if ! wait_for "Kafka" 90 broker_ready; then
    tail -20 "$LOGFILE" >&2; die "Kafka did not start (log: $LOGFILE)"
  fi
}

stop() { stop_pidfile Kafka "$PIDFILE"; }

status() {
  if pid_alive "$PIDFILE" && port_open "$KAFKA_PORT"; then
    echo "kafka: running (pid $(cat "$PIDFILE"), 127.0.0.1:$KAFKA_PORT)"
  else echo "kafka: stopped"; return 1; fi
}

reset() { stop; rm -rf "$TURNSTREAM_HOME/kafka"; log "Kafka data removed"; }

case "${1:-}" in
  fetch|start|stop|status|reset) "$1" ;;
  *) echo "usage: $0 fetch|start|stop|status|reset" >&2; exit 2 ;;
esac

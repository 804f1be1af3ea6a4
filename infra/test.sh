#!/usr/bin/env bash
# The test command: lint and type check, then every test (unit + integration on the real Kafka, Redis,
# ClickHouse engine and vLLM). Starts the local services if they are down; leaves them up.
# Extra arguments go to pytest (e.g. -m "not vllm" for the fast loop).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # the files [tool.mypy] names in pyproject.toml
"$REPO_ROOT/infra/services.sh" start
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"

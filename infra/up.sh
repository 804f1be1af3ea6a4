#!/usr/bin/env bash
# The main command: set up this machine if needed, start the whole local stack with the
# bundled model, and open the terminal chat. Ctrl-C / Ctrl-D at the prompt stops everything.
# Extra arguments go to `python -m infra.stack` (e.g. --serve, --engine fake).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$REPO_ROOT/infra/setup.sh"
cd "$REPO_ROOT" && exec "$PYTHON" -m infra.stack "$@"

#!/usr/bin/env bash
# One command for a new user: set everything up, then run examples/hello on the local model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/gliding run examples/hello/task.yaml "$@"

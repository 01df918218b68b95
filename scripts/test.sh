#!/usr/bin/env bash
# One command for the tests: set everything up, lint, check the layering, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/ruff check gliding tests scripts
.venv/bin/lint-imports
.venv/bin/mypy gliding
.venv/bin/python -m pytest -q "$@"

#!/usr/bin/env bash
# One command for the tests (CI runs it): set everything up, lint, check the import contracts,
# type-check, run the whole suite: slow (the real local model) and heavy tests included.
# scripts/test_fast.sh is the quick lane without slow and heavy tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
# bytecode caches on (an environment may turn them off): no module, test or subprocess compiles
# its sources again on every run, and pytest keeps its rewritten tests
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check gliding tests scripts
.venv/bin/lint-imports
.venv/bin/mypy gliding
.venv/bin/python -m pytest -q "$@"

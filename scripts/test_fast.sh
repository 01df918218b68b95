#!/usr/bin/env bash
# The fast lane, for before every commit (about 2 minutes on two cores): lint, the import
# contracts, types, and every test that is neither slow (the real local model) nor heavy (real
# servers, embedding-model loads, big property runs, whole jobs in subprocesses). It assumes
# scripts/setup.sh has run once. CI runs scripts/test.sh: setup and the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
# bytecode caches on (an environment may turn them off): no module, test or subprocess compiles
# its sources again on every run, and pytest keeps its rewritten tests
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check gliding tests scripts
.venv/bin/lint-imports
.venv/bin/mypy gliding
# four test processes (pytest-xdist): many tests wait (servers, subprocesses, timeouts), so two
# cores keep four busy; TEST_WORKERS=0 runs serially (not GLIDING_...: every GLIDING_ variable
# is a setting, and the tests' own config loads would refuse an unknown one)
.venv/bin/python -m pytest -q -n "${TEST_WORKERS:-4}" -m "not slow and not heavy" "$@"

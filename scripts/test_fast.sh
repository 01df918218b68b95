#!/usr/bin/env bash
# The fast lane, for before every commit (about 2.5 minutes on two cores): lint, the import
# contracts, types, and every test that is neither slow (the real local model) nor heavy (real
# servers, embedding-model loads, big property runs, whole jobs in subprocesses). It assumes
# scripts/setup.sh has run once. CI runs scripts/test.sh: setup and the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
.venv/bin/ruff check gliding tests scripts
.venv/bin/lint-imports
.venv/bin/mypy gliding
# two test processes (pytest-xdist) on a two-core machine; GLIDING_TEST_WORKERS=0 runs serially
.venv/bin/python -m pytest -q -n "${GLIDING_TEST_WORKERS:-2}" -m "not slow and not heavy" "$@"

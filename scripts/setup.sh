#!/usr/bin/env bash
# Sets up Gliding in ./.venv (idempotent, offline after the first run): Python packages from PyPI,
# llama-cpp-python built once from source and its wheel kept in ~/.cache/gliding/wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${GLIDING_VENV:-.venv}
WHEELS=${GLIDING_WHEEL_CACHE:-$HOME/.cache/gliding/wheels}
LLAMA=llama-cpp-python==0.3.36

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

mkdir -p "$WHEELS"
if ! "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1; then
  if ! ls "$WHEELS"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
    echo "setup: building $LLAMA from source (about 6-15 minutes, once per machine)" >&2
    "$VENV/bin/python" -m pip wheel -q --no-deps -w "$WHEELS" "$LLAMA"
  fi
fi
echo "setup: installing gliding and its dependencies" >&2
"$VENV/bin/python" -m pip install -q --find-links "$WHEELS" -e ".[dev]"
"$VENV/bin/gliding" --version

#!/usr/bin/env bash
# Sets up Gliding in ./.venv (idempotent, offline after the first run): Python packages from PyPI,
# every extra (local, embeddings, qdrant, plots) and the dev tools; llama-cpp-python built once
# from source and its wheel kept in ~/.cache/gliding/wheels.
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

# bubblewrap confines the commands agents run (tools.sandbox: bwrap, the default); a job refuses
# to start without it. Installed here where this user may (root with apt-get).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap (apt-get)" >&2
    apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null; } \
      || echo "setup: could not install bubblewrap; jobs refuse to start until it is there" \
              "(or tools.sandbox: off)" >&2
  else
    echo "setup: bubblewrap (bwrap) is missing: install it (Debian: apt-get install bubblewrap);" \
         "until then jobs refuse to start unless tools.sandbox: off" >&2
  fi
fi

# mosquitto is the MQTT 5 broker of the network bus (bus.url); the tests start their own on a
# free port (gliding.testing.servers.mosquitto), so no service is enabled or started here.
if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing mosquitto (apt-get)" >&2
    apt-get install -y -q --no-install-recommends mosquitto >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && apt-get install -y -q --no-install-recommends mosquitto >/dev/null; } \
      || echo "setup: could not install mosquitto; the MQTT bus tests fail until it is there" >&2
  else
    echo "setup: mosquitto is missing: install it (Debian: apt-get install mosquitto);" \
         "until then the MQTT bus tests fail (the in-process bus needs nothing)" >&2
  fi
fi

# Chromium and its chromedriver drive the dashboard's browser tests (tests/daemon/
# test_dashboard_browser.py; selenium never downloads a browser or driver of its own).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium and chromium-driver (apt-get)" >&2
    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && apt-get install -y -q chromium chromium-driver >/dev/null; } \
      || echo "setup: could not install chromium; the dashboard's browser tests fail in CI" \
              "until it is there" >&2
  else
    echo "setup: chromium or chromedriver is missing: install them (Debian: apt-get install" \
         "chromium chromium-driver); until then the dashboard's browser tests skip" >&2
  fi
fi

mkdir -p "$WHEELS"
if ! "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1; then
  if ! ls "$WHEELS"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
    echo "setup: building $LLAMA from source (about 6-15 minutes, once per machine)" >&2
    "$VENV/bin/python" -m pip wheel -q --no-deps -w "$WHEELS" "$LLAMA"
  fi
fi
echo "setup: installing gliding with every extra and the dev tools" >&2
"$VENV/bin/python" -m pip install -q --find-links "$WHEELS" -e ".[all,dev]"
"$VENV/bin/gliding" --version

# The core's dependency wheels, for tests/integration/test_slim_install.py: it installs gliding's
# wheel into a fresh venv with `pip install --no-index --find-links .cache/core-wheels` (no test
# reaches beyond loopback). The list is pyproject.toml's [project] dependencies under a line
# naming the Python, so it never drifts; `pip wheel` fetches them with their own dependencies
# (building any sdist), once: skipped while the list matches the folder's requirements.txt.
CORE_WHEELS=.cache/core-wheels
CORE_REQS=$("$VENV/bin/python" -c 'import sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(f"# Python {sys.version_info[0]}.{sys.version_info[1]}", *deps, sep="\n")')
if [ "$CORE_REQS" != "$(cat "$CORE_WHEELS/requirements.txt" 2>/dev/null)" ]; then
  echo "setup: fetching the core's dependency wheels into $CORE_WHEELS (pip wheel)" >&2
  rm -rf "$CORE_WHEELS" && mkdir -p "$CORE_WHEELS"
  printf '%s\n' "$CORE_REQS" >"$CORE_WHEELS/requirements.in"
  "$VENV/bin/python" -m pip wheel -q -w "$CORE_WHEELS" -r "$CORE_WHEELS/requirements.in" \
    && mv "$CORE_WHEELS/requirements.in" "$CORE_WHEELS/requirements.txt" \
    || echo "setup: pip could not fetch them; tests/integration/test_slim_install.py fails" \
            "until it can" >&2
fi

# The node MCP programs tests/mcp starts (server-everything, server-filesystem, the Inspector):
# installed with npm from the pinned tests/mcp/package.json + package-lock.json into
# .cache/mcp-servers (git-ignored). Skipped when the installed copy matches the lock (offline
# after the first run); without node those tests skip and say so.
MCP_DIR=.cache/mcp-servers
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  mkdir -p "$MCP_DIR"
  if ! cmp -s tests/mcp/package-lock.json "$MCP_DIR/node_modules/.gliding-lock.json"; then
    echo "setup: installing the node MCP programs of tests/mcp into $MCP_DIR (npm ci)" >&2
    cp tests/mcp/package.json tests/mcp/package-lock.json "$MCP_DIR/"
    (cd "$MCP_DIR" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null) \
      && cp tests/mcp/package-lock.json "$MCP_DIR/node_modules/.gliding-lock.json" \
      || echo "setup: npm could not install them; tests/mcp will fail until it can" >&2
  fi
else
  echo "setup: node/npm not found: the tests/mcp tests that need node will be skipped" >&2
fi

#!/usr/bin/env bash
# Run the fix-tests example on a fresh copy of repo/ (the job fixes the copy in workspace/,
# which git ignores; repo/ stays as it is). Arguments go to `gliding run`, e.g.
#   bash examples/fix-tests/run.sh --model scripted:examples/fix-tests/replies.yaml
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gliding=${GLIDING:-$(command -v gliding || echo "$here/../../.venv/bin/gliding")}
rm -rf "$here/workspace"
cp -r "$here/repo" "$here/workspace"
exec "$gliding" run "$here/task.yaml" "$@"

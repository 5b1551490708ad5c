#!/usr/bin/env bash
# The project's test command (README "Tests"): every test of the core and of each plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m pytest -q -p no:cacheprovider --durations=15 "$@"

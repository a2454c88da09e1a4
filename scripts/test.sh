#!/usr/bin/env bash
# Run the whole test suite once per Keras backend; fail if any backend fails.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
status=0
for backend in tensorflow jax torch; do
    echo "=== KERAS_BACKEND=$backend ==="
    KERAS_BACKEND=$backend "$PY" -m pytest "$@" || status=1
done
exit $status

#!/usr/bin/env bash
# Run the whole test suite once per Keras backend; fail if any run fails.
# The runs go side by side, each run's output printed whole, in order, when
# all have finished. JAX's run (it compiles every eager operation per shape)
# goes as two processes over alternate test files (KBERT_TEST_SHARD,
# tests/conftest.py), so that both cores stay busy to the end; TensorFlow's
# run, one process, is now the last to end. PyTorch's run keeps to one OpenMP thread: with several runs on two
# cores its threads would spin-wait for each other (a small LSTM step took
# 0.5 s with two threads, 5 ms with one).
# Each run leaves a JUnit report in test-reports/; the 30 slowest tests of
# each backend are printed before the runs' logs (scripts/test_durations.py).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
REPORTS=${REPORTS:-test-reports}
RUNS=(tensorflow jax.1/2 jax.2/2 torch)  # backend[.shard/shards]
logs=$(mktemp -d)
rm -f "$REPORTS"/*.xml
mkdir -p "$REPORTS"
pids=()
for run in "${RUNS[@]}"; do
    backend=${run%%.*}
    settings=(KERAS_BACKEND=$backend)
    [ "$backend" = torch ] && settings+=(OMP_NUM_THREADS=1)
    [ "$run" != "$backend" ] && settings+=(KBERT_TEST_SHARD=${run#*.})
    name=${run/\//of}
    env "${settings[@]}" "$PY" -m pytest --junitxml="$REPORTS/$name.xml" "$@" > "$logs/$name.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
"$PY" scripts/test_durations.py "$REPORTS" --top 30
for run in "${RUNS[@]}"; do  # last, so that each run's closing line ends the output
    echo "=== ${run/./ shard } ==="
    cat "$logs/${run/\//of}.log"
done
rm -rf "$logs"
exit $status

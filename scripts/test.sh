#!/usr/bin/env bash
# Run the whole test suite once per Keras backend; fail if any backend fails.
# The three runs go side by side (much of a run is single-threaded dispatch and
# compilation, so two cores serve three runs); each run's output is printed
# whole, in order, when all have finished. PyTorch's run keeps to one OpenMP
# thread: with three runs on two cores its threads would spin-wait for each
# other (a small LSTM step took 0.5 s with two threads, 5 ms with one).
# Each run leaves a JUnit report in test-reports/; the 30 slowest tests of
# each backend are printed before the runs' logs (scripts/test_durations.py).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
REPORTS=${REPORTS:-test-reports}
logs=$(mktemp -d)
mkdir -p "$REPORTS"
pids=()
for backend in tensorflow jax torch; do
    threads=()
    [ "$backend" = torch ] && threads=(OMP_NUM_THREADS=1)
    env ${threads[@]+"${threads[@]}"} KERAS_BACKEND=$backend "$PY" -m pytest --junitxml="$REPORTS/$backend.xml" \
        "$@" > "$logs/$backend.log" 2>&1 &
    pids+=($!)
done
status=0
for i in 0 1 2; do
    wait "${pids[$i]}" || status=1
done
"$PY" scripts/test_durations.py "$REPORTS" --top 30
for backend in tensorflow jax torch; do  # last, so that each run's closing line ends the output
    echo "=== KERAS_BACKEND=$backend ==="
    cat "$logs/$backend.log"
done
rm -rf "$logs"
exit $status

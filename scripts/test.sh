#!/usr/bin/env bash
# Run the whole test suite once per Keras backend; fail if any backend fails.
# The three runs go side by side (much of a run is single-threaded dispatch and
# compilation, so two cores serve three runs); each run's output is printed
# whole, in order, when all have finished. PyTorch's run keeps to one OpenMP
# thread: with three runs on two cores its threads would spin-wait for each
# other (a small LSTM step took 0.5 s with two threads, 5 ms with one).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
logs=$(mktemp -d)
pids=()
for backend in tensorflow jax torch; do
    threads=()
    [ "$backend" = torch ] && threads=(OMP_NUM_THREADS=1)
    env ${threads[@]+"${threads[@]}"} KERAS_BACKEND=$backend "$PY" -m pytest "$@" > "$logs/$backend.log" 2>&1 &
    pids+=($!)
done
status=0
for i in 0 1 2; do
    wait "${pids[$i]}" || status=1
done
for backend in tensorflow jax torch; do
    echo "=== KERAS_BACKEND=$backend ==="
    cat "$logs/$backend.log"
done
rm -rf "$logs"
exit $status

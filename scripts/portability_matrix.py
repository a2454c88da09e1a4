"""The whole portability matrix: every model of `tests/portability.py` saved on each backend, loaded on the two others.

    python scripts/portability_matrix.py [--output benchmarks/results/portability_matrix.md]

For each backend A, one process trains every model one step with kbert's optimizer and saves it; then
for each other backend B, one process loads them all and checks them (outputs to 1e-4, the optimizer's
slots on their variables, one more training step, a save). The table has a row per model and a column per
ordered pair A -> B: `ok`, or the error's first words. The suite runs a rotation of this matrix
(`tests/test_portability.py`); this script is the record of all of it.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
HELPER = ROOT / "tests" / "portability.py"
BACKENDS = ("tensorflow", "jax", "torch")


def _run(backend, *arguments):
    environment = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, str(HELPER), *arguments], env=environment, capture_output=True,
                          text=True)


def _models():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import portability, json; "
            "print(json.dumps(list(portability.MOVED)))")
    done = subprocess.run([sys.executable, "-c", code, str(HELPER.parent)],
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "torch"},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "portability_matrix.md"))
    args = parser.parse_args()
    names, results, start = _models(), {}, time.time()
    with tempfile.TemporaryDirectory() as folder:
        for source in BACKENDS:
            os.makedirs(os.path.join(folder, source))
            saved = _run(source, "save", os.path.join(folder, source))
            for destination in (b for b in BACKENDS if b != source):
                pair = f"{source} -> {destination}"
                if saved.returncode:
                    results[pair] = {name: "not saved: " + saved.stderr.strip().splitlines()[-1] for name in names}
                    continue
                loaded = _run(destination, "load", os.path.join(folder, source))
                lines = loaded.stdout.strip().splitlines()
                results[pair] = json.loads(lines[-1]) if loaded.returncode == 0 and lines else {
                    name: "the process failed: " + loaded.stderr.strip().splitlines()[-1] for name in names}
                print(pair, sum(error is None for error in results[pair].values()), "of", len(names), flush=True)
    pairs = list(results)
    moved = sum(results[pair].get(name) is None for pair in pairs for name in names)
    counts = ", ".join(f"{pair}: {sum(results[pair].get(name) is None for name in names)}" for pair in pairs)
    lines = [f"# Portability matrix: {moved} of {len(pairs) * len(names)} (model, backend pair) moves hold",
             "", f"`python scripts/portability_matrix.py`, {time.strftime('%Y-%m-%d')}, "
             f"{time.time() - start:.0f} s: {len(names)} models, {len(pairs)} backend pairs ({counts} of "
             f"{len(names)} each). Each model trained one step with kbert's optimizer on the first backend, saved "
             "as `.keras`, loaded on the second in a fresh process: weights exactly equal, outputs equal to 1e-4, "
             "Adam slots on their variables, one more step, a save.", "",
             "| model | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    for name in names:
        cells = ["ok" if results[pair].get(name) is None else results[pair][name][:80].replace("|", "/")
                 for pair in pairs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    pathlib.Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

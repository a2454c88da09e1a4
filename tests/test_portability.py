"""Models trained on this backend load, answer alike and train on the two others (a rotation of the matrix).

Every family's task model and every pretrainer (`tests/portability.py`,
`MOVED`) moves in one of the three backends' runs: a share of them (the
models take `conftest.ROTATION`'s slots in turn: a quarter for TensorFlow
and JAX, half for PyTorch) is
trained one step here with kbert's optimizer and saved as `.keras`; then one
fresh process per other backend loads its share and checks it: the same weights
exactly, the same outputs to 1e-4, each variable's Adam slots back on that variable, one more
training step, a save. The shares alternate between the two other backends,
so that the three runs together move every model once and cover all six
ordered backend pairs (the suite's time allows no more). `scripts/portability_matrix.py` runs the
whole matrix (every model, every pair) and writes
`benchmarks/results/portability_matrix.md`.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import BACKENDS, ROTATION
from helpers import BACKEND
from portability import MOVED, save

NAMES = sorted(MOVED)
SCRIPT = pathlib.Path(__file__).resolve().parent / "portability.py"
TIMEOUT_S = 900


def destinations(backend):
    """name -> the backend that loads it, for the models `backend`'s run saves (`ROTATION`'s share), sent to
    the two other backends in turn."""
    others = [other for other in BACKENDS if other != backend]
    mine = [name for index, name in enumerate(NAMES) if ROTATION[index % len(ROTATION)] == backend]
    return {name: others[index % 2] for index, name in enumerate(mine)}


def _load_on(backend, folder, names):
    """name -> error or None, from a fresh process on `backend` that loads `names` from `folder`."""
    environment = {**os.environ, "KERAS_BACKEND": backend}
    done = subprocess.run([sys.executable, str(SCRIPT), "load", str(folder), *names], env=environment,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {name: f"the {backend} process failed: {done.stderr[-2000:]}" for name in names}
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """name -> (the backend that loaded it, its error or None)."""
    folder = tmp_path_factory.mktemp("portability")
    chosen = destinations(BACKEND)
    save(folder, list(chosen))
    found = {}
    for backend in sorted(set(chosen.values())):
        names = [name for name in chosen if chosen[name] == backend]
        found.update({name: (backend, error) for name, error in _load_on(backend, folder, names).items()})
    return found


@pytest.mark.backend_independent
def test_the_rotation_covers_every_model_and_pair():
    moves = {name: (source, destination) for source in BACKENDS for name, destination in destinations(source).items()}
    assert sorted(moves) == NAMES
    assert len(set(moves.values())) == 6


@pytest.mark.slow(reason="two fresh processes of the other backends load, check and train this run's share")
@pytest.mark.parametrize("name", sorted(destinations(BACKEND)))
def test_saved_here_loads_answers_and_trains_there(name, results):
    backend, error = results[name]
    assert error is None, f"{name} saved on {BACKEND}, loaded on {backend}: {error}"

"""The two halves of the portability matrix: save models trained on one backend, load and check them on another.

    KERAS_BACKEND=jax python tests/portability.py save FOLDER [NAME ...]
    KERAS_BACKEND=torch python tests/portability.py load FOLDER [NAME ...]

`save` trains each model of `MOVED` one step with kbert's optimizer
(`create_optimizer`), saves it as `FOLDER/NAME.keras`, and keeps its batch,
its weights and optimizer slots (by variable path) and its outputs on that
batch in `FOLDER/NAME.pkl`. `load`, in a fresh process on another backend, loads each
file and checks that every weight came back exactly equal, that its outputs, called and
through `predict`, equal the saved ones (to 1e-4), that every variable's Adam slots came
back to that variable, that one more training step runs to a finite loss, and that
the model saves again; it prints one JSON object, name -> the error (null where all held). Names default to all of
`MOVED`. `tests/test_portability.py` runs a rotation of the pairs in each
backend's suite; `scripts/portability_matrix.py` runs them all.
"""

import json
import os
import pathlib
import pickle
import sys
import tempfile

import keras
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from trainable_models import FAMILY_MODELS, MODELS  # noqa: E402

from kbert.training import create_optimizer  # noqa: E402

PRETRAINERS = ("BertPretrainer_nsp", "BertPretrainer_sop", "SpanBertPretrainer", "ElectraPretrainer",
               "DistillationTrainer", "BiLMPretrainer", "StructBertPretrainer", "XLNetPretrainer")
# Every family's task model and every pretrainer (T5's span corruption and BART's denoising train
# the `Seq2SeqLM`s of FAMILY_MODELS).
MOVED = {**FAMILY_MODELS, **{name: MODELS[name] for name in PRETRAINERS}}
# Outputs drawn at random in the forward pass (ELECTRA samples its replacements): compared where
# they do not depend on the draw.
SAMPLED_OUTPUTS = {"ElectraPretrainer": ("mlm_logits",)}
TOLERANCE = 1e-4
# XLA on TensorFlow: compiling each model's step and `predict` would cost most of the suite's time (JAX's
# eager steps are slower than its compiled ones; PyTorch compiles nothing by default).
JIT_COMPILE = False if keras.backend.backend() == "tensorflow" else "auto"


def _numpy(tree):
    return keras.tree.map_structure(lambda value: None if value is None else np.asarray(value), tree)


def _outputs(name, outputs):
    """A model's `outputs` (those not drawn at random) as a flat list of float64 arrays."""
    if name in SAMPLED_OUTPUTS:
        outputs = {key: outputs[key] for key in SAMPLED_OUTPUTS[name]}
    return [np.asarray(keras.ops.convert_to_numpy(value), np.float64) for value in keras.tree.flatten(outputs)]


def _slots(model):
    """variable path -> its Adam momentum and velocity."""
    optimizer = model.optimizer
    slots = {}
    for variable in model.trainable_variables:
        index = optimizer._get_variable_index(variable)
        slots[variable.path] = [keras.ops.convert_to_numpy(optimizer._momentums[index]),
                                keras.ops.convert_to_numpy(optimizer._velocities[index])]
    return slots


def _weights(model):
    """weight path -> its value (trainable and not; no random seeds)."""
    return {weight.path: keras.ops.convert_to_numpy(weight) for weight in model.weights}


def save(folder, names):
    """Train each of `names` one step, save it and what `load` checks it against into `folder`."""
    for name in names:
        keras.utils.set_random_seed(0)
        model, (x, y) = MOVED[name]()
        model.compile(optimizer=create_optimizer("adamw", 1e-3, total_steps=10, warmup_steps=1),
                      jit_compile=JIT_COMPILE)
        model.train_on_batch(x, y)
        model.save(os.path.join(folder, f"{name}.keras"))
        record = {"x": _numpy(x), "y": _numpy(y), "outputs": _outputs(name, model(x, training=False)),
                  "weights": _weights(model), "slots": _slots(model), "backend": keras.backend.backend()}
        with open(os.path.join(folder, f"{name}.pkl"), "wb") as f:
            pickle.dump(record, f)


def check(folder, name):
    """Load `name` from `folder` on this backend and check it (see the module docstring); raises on a failure."""
    with open(os.path.join(folder, f"{name}.pkl"), "rb") as f:
        record = pickle.load(f)
    model = keras.saving.load_model(os.path.join(folder, f"{name}.keras"))
    if not JIT_COMPILE:
        model.jit_compile = False
    weights = _weights(model)
    assert sorted(weights) == sorted(record["weights"]), "the weights differ"
    for path, expected in record["weights"].items():
        np.testing.assert_array_equal(weights[path], expected, err_msg=f"weight {path}")
    # Called, and through `predict` (what `kbert predict` runs: traced, compiled on JAX and TensorFlow).
    for outputs in (model(record["x"], training=False), model.predict(record["x"], verbose=0)):
        for got, expected in zip(_outputs(name, outputs), record["outputs"], strict=True):
            np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=TOLERANCE, err_msg="outputs")
    slots = _slots(model)
    assert sorted(slots) == sorted(record["slots"]), "the trainable variables differ"
    for path, expected in record["slots"].items():
        for got, want in zip(slots[path], expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5, err_msg=f"optimizer slot of {path}")
    loss = model.train_on_batch(record["x"], record["y"])
    assert np.isfinite(np.asarray(keras.tree.flatten(loss)[0])), f"step loss {loss}"
    with tempfile.TemporaryDirectory() as again:
        model.save(os.path.join(again, f"{name}.keras"))


def load(folder, names):
    """name -> the error of `check` as one line, or None."""
    results = {}
    for name in names:
        try:
            check(folder, name)
            results[name] = None
        except Exception as error:  # every model is checked, each failure reported
            results[name] = " ".join(f"{type(error).__name__}: {error}".split())[:600]
    return results


if __name__ == "__main__":
    command, folder, *chosen = sys.argv[1:]
    chosen = chosen or list(MOVED)
    if command == "save":
        save(folder, chosen)
    else:
        print(json.dumps(load(folder, chosen)))

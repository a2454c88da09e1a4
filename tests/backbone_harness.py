"""The backbone harness: the checks every backbone family passes, one function per check.

As KerasHub's `run_backbone_test` does for its backbones, each family's test
file describes one or more `BackboneCase`s and parametrizes one test over
`BACKBONE_CHECKS`:

    @pytest.mark.parametrize("check", BACKBONE_CHECKS)
    def test_backbone_harness(check, tmp_path):
        run_backbone_check(check, CASE, tmp_path)

The checks: the config round trip, two batch sizes and two lengths, `predict`
on a `tf.data` dataset, `mixed_float16` and `mixed_bfloat16`, `jit_compile=True`
(XLA on TensorFlow, `jax.jit` on JAX, `torch.compile` on PyTorch) and `.keras`
save and load. tests/task_harness.py adds the task checks on top.
"""

import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable

import keras
import numpy as np
import pytest
from helpers import BACKEND, to_float32_numpy, to_numpy

from kbert.backend.ops import dtype_name
from kbert.models import seq2seq_inputs


@dataclasses.dataclass
class BackboneCase:
    """One model configuration and the inputs the checks feed it.

    Attributes:
        make_model: returns a fresh model. It must not pass `dtype`, so that
            the model picks up the global dtype policy.
        make_inputs: `(batch, length) -> dict` of NumPy inputs.
        batch_sizes, lengths: two of each, both accepted by the family (BigBird
            and Longformer take multiples of their block and window); the last
            batch size must not divide by the first (a short last batch).
        compared_outputs: the output names that are a function of the inputs
            and weights alone (None: all of them); ELECTRA's sampled ids are not.
        float32_outputs: output names that stay float32 under a mixed policy
            (a single-tensor output is named "output").
        mixed_tolerance: bound, relative to the float32 output's largest
            magnitude (at least 1), on the difference between float32 and the
            mixed policy's outputs with the same weights.
        torch_compile_failure: why `torch.compile` fails on this family today;
            the `jit_compile` check is then skipped on PyTorch only.
    """

    make_model: Callable[[], keras.Model]
    make_inputs: Callable[[int, int], dict]
    batch_sizes: tuple = (2, 3)
    lengths: tuple = (8, 12)
    compared_outputs: tuple | None = None
    float32_outputs: tuple = ()
    mixed_tolerance: dict = dataclasses.field(
        default_factory=lambda: {"mixed_bfloat16": 0.05, "mixed_float16": 0.01}
    )
    torch_compile_failure: str | None = None

    def inputs(self, batch=None, length=None):
        """Inputs of the first batch size and length unless given."""
        return self.make_inputs(batch or self.batch_sizes[0], length or self.lengths[0])

    def outputs(self, model, x):
        """The compared outputs of `forward(model, x)` as a dict of NumPy arrays (float32 for half floats)."""
        return self.compared(forward(model, x))

    def compared(self, outputs):
        outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
        names = self.compared_outputs or sorted(outputs)
        return {name: to_float32_numpy(outputs[name]) if _is_float(outputs[name])
                else to_numpy(outputs[name]) for name in names}


def forward(model, x):
    """`model(x)`; on JAX, `predict_on_batch(x)`: one XLA program per shape, as `predict` and `fit` run
    there. An eager JAX call compiles each operation alone, most of the JAX run's harness time;
    `check_jit_compile` keeps one eager call of each model to compare against."""
    return model.predict_on_batch(x) if BACKEND == "jax" else model(x)


def _is_float(value):
    return "float" in dtype_name(value)


def assert_outputs_close(actual, expected, atol, context=""):
    assert sorted(actual) == sorted(expected), context
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=atol, rtol=0,
                                   err_msg=f"{context} output {name!r}")


def _json_normalized(config):
    return json.loads(json.dumps(config))


def check_config_round_trip(case):
    """`from_config(get_config())`: a registered class, the same config (through JSON), the same outputs."""
    model = case.make_model()
    x = case.inputs()
    expected = case.outputs(model, x)
    cls = type(model)
    assert keras.saving.get_registered_object(keras.saving.get_registered_name(cls)) is cls
    config = _json_normalized(model.get_config())
    clone = cls.from_config(config)
    assert type(clone) is cls
    assert _json_normalized(clone.get_config()) == config
    if not clone.built:  # build what from_config left unbuilt
        clone(x)
    clone.set_weights(model.get_weights())
    assert_outputs_close(case.outputs(clone, x), expected, atol=1e-6, context="from_config")


def check_variable_batch_and_length(case):
    """Two batch sizes with two lengths through one model: finite outputs, rows independent of the batch.

    The shapes are the ones `check_predict_on_dataset` uses too (JAX compiles each new shape).
    """
    model = case.make_model()
    for batch, length in zip(case.batch_sizes, case.lengths):
        outputs = case.outputs(model, case.inputs(batch, length))
        for name, value in outputs.items():
            assert value.shape[0] == batch, (name, value.shape, batch)
            assert np.all(np.isfinite(value)), name
    first_rows = keras.tree.map_structure(lambda v: v[: case.batch_sizes[0]], case.inputs(*_last_shape(case)))
    expected = {name: value[: case.batch_sizes[0]] for name, value in outputs.items()}
    assert_outputs_close(case.outputs(model, first_rows), expected, atol=1e-5, context="first rows alone")


def _last_shape(case):
    return case.batch_sizes[-1], case.lengths[-1]


def check_predict_on_dataset(case):
    """`predict` on a batched `tf.data.Dataset` (a short last batch included) equals the eager call."""
    tf = pytest.importorskip("tensorflow")
    model = case.make_model()
    x = case.inputs(*_last_shape(case))
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(case.batch_sizes[0])
    predicted = case.compared(model.predict(dataset, verbose=0))
    assert_outputs_close(predicted, case.outputs(model, x), atol=1e-5, context="predict")


def check_dtype_policy(case, policy):
    """Built under a mixed policy: float32 variables, outputs finite, in the compute dtype, close to float32.

    Returns the mixed model and its inputs, for the task harness's loss check.
    """
    reference = case.make_model()
    x = case.inputs()
    expected = case.outputs(reference, x)

    keras.config.set_dtype_policy(policy)  # conftest restores float32
    model = case.make_model()
    compute_dtype = keras.dtype_policies.get(policy).compute_dtype
    assert model.compute_dtype == compute_dtype
    for variable in model.weights:
        if _is_float(variable):
            assert dtype_name(variable) == "float32", variable.path
    model.set_weights(reference.get_weights())
    raw = forward(model, x)
    raw = raw if isinstance(raw, dict) else {"output": raw}
    for name in case.compared_outputs or raw:
        if _is_float(raw[name]):
            wanted = "float32" if name in case.float32_outputs else compute_dtype
            assert dtype_name(raw[name]) == wanted, (name, dtype_name(raw[name]), wanted)
    actual = case.compared(raw)
    for name, value in actual.items():
        assert np.all(np.isfinite(value)), name
        scale = max(1.0, float(np.abs(expected[name]).max()))
        tolerance = case.mixed_tolerance[policy] * scale
        np.testing.assert_allclose(value, expected[name], atol=tolerance, rtol=0, err_msg=f"{policy} {name}")
    return model, x


# `torch.compile`'s default backend (inductor) generates and builds C++ for every
# graph: on 2 shared cores that took 220 s for the tiny GPT-2 and 26 minutes for
# the tiny ELMo. The check runs Dynamo's graph capture (what breaks when a model
# does not compile) with the eager backend instead.
TORCH_COMPILE_BACKEND = "eager"


def _torch_compile_backend():
    """Within: Keras's `torch.compile` calls use `TORCH_COMPILE_BACKEND` (no-op on other backends)."""
    if BACKEND != "torch":
        return contextlib.nullcontext()
    import torch
    from unittest import mock

    return mock.patch.object(torch, "compile", functools.partial(torch.compile, backend=TORCH_COMPILE_BACKEND))


def check_jit_compile(case):
    """`compile(jit_compile=True)` then `predict` equals the eager call (XLA, `jax.jit`, `torch.compile`)."""
    if BACKEND == "torch" and case.torch_compile_failure:
        pytest.skip(f"torch.compile fails on this family today: {case.torch_compile_failure}")
    model = case.make_model()
    x = case.inputs()
    model.compile(jit_compile=True)
    assert model.jit_compile
    with _torch_compile_backend():
        predicted = case.compared(model.predict(x, batch_size=case.batch_sizes[0], verbose=0))
    assert_outputs_close(predicted, case.compared(model(x)), atol=1e-5, context="jit_compile")


def check_save_load(case, tmp_path):
    """`.keras` save and load: the same class, identical weights and outputs."""
    model = case.make_model()
    x = case.inputs()
    if not model.built:
        model(x)
    path = tmp_path / "model.keras"
    model.save(path)
    expected = case.outputs(model, x)  # after saving: the random state is the saved one
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert len(loaded.weights) == len(model.weights)
    for new, old in zip(loaded.weights, model.get_weights()):
        if _is_float(new):
            np.testing.assert_array_equal(to_numpy(new), old, err_msg=new.path)
    assert_outputs_close(case.outputs(loaded, x), expected, atol=0, context="loaded")


def causal_harness_inputs(batch, length, vocabulary_size=40):
    """A decoder's inputs: random ids from 1 on, every other row left-padded by 3 (with id 0)."""
    token_ids = np.random.default_rng(length).integers(1, vocabulary_size, (batch, length)).astype("int32")
    padding_mask = (np.arange(length)[None, :] >= 3 * (np.arange(batch)[:, None] % 2)).astype("int32")
    return {"token_ids": token_ids * padding_mask, "padding_mask": padding_mask}


def seq2seq_harness_inputs(batch, length, vocabulary_size=40, pad_id=0, start_id=0, end_id=1):
    """Teacher-forcing inputs: `length` source ids from 3 on, `length // 2` targets; every other row padded."""
    rng = np.random.default_rng(length)
    source_lengths = length - 3 * (np.arange(batch) % 2)
    sources = rng.integers(3, vocabulary_size, (batch, length))
    sources = np.where(np.arange(length) < source_lengths[:, None], sources, pad_id)
    targets = rng.integers(3, vocabulary_size, (batch, length // 2))
    targets[:, -1] = end_id
    targets[1::2, -2:] = pad_id
    return seq2seq_inputs(sources, targets, pad_id=pad_id, start_id=start_id)


def _backbone_checks(tmp_path):
    return {
        "config_round_trip": check_config_round_trip,
        "variable_batch_and_length": check_variable_batch_and_length,
        "predict_on_dataset": check_predict_on_dataset,
        "mixed_float16": lambda case: check_dtype_policy(case, "mixed_float16"),
        "mixed_bfloat16": lambda case: check_dtype_policy(case, "mixed_bfloat16"),
        "jit_compile": check_jit_compile,
        "save_load": lambda case: check_save_load(case, tmp_path),
    }


BACKBONE_CHECKS = tuple(_backbone_checks(None))


def run_backbone_check(check, case, tmp_path):
    """Run one of `BACKBONE_CHECKS` on a `BackboneCase`."""
    checks = _backbone_checks(tmp_path)
    if check not in checks:
        raise ValueError(f"Unknown check {check!r}; known: {BACKBONE_CHECKS}.")
    checks[check](case)

import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    dense_weights,
    np_dense,
    random_floats,
    run_standard_check,
    to_numpy,
)

from kbert.layers import FusedDense

BATCH, LENGTH, WIDTH, UNITS = 2, 5, 6, 4


def relu_case():
    return LayerCase(
        make_layer=lambda: FusedDense(UNITS, activation="relu"),
        inputs={"inputs": random_floats(np.random.default_rng(0), (BATCH, LENGTH, WIDTH))},
        expected_shape=(BATCH, LENGTH, UNITS),
    )


def no_bias_case():
    return LayerCase(
        make_layer=lambda: FusedDense(UNITS, use_bias=False),
        inputs={"inputs": random_floats(np.random.default_rng(0), (BATCH, WIDTH))},
        expected_shape=(BATCH, UNITS),
    )


CASES = {"relu_3d": relu_case, "no_bias_2d": no_bias_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


@pytest.mark.parametrize("use_bias", [True, False])
def test_matches_numpy_and_keras_dense(use_bias):
    # Tolerance 1e-5: float32 matmuls of width 6, bias added inside or after.
    layer = FusedDense(UNITS, use_bias=use_bias, bias_initializer="random_normal")
    x = random_floats(np.random.default_rng(1), (BATCH, LENGTH, WIDTH))
    outputs = to_numpy(layer(x))
    np.testing.assert_allclose(outputs, np_dense(x, *dense_weights(layer)), atol=1e-5, rtol=0)
    reference = keras.layers.Dense.from_config(layer.get_config())
    reference.build(x.shape)
    reference.set_weights(layer.get_weights())
    np.testing.assert_allclose(outputs, to_numpy(reference(x)), atol=1e-6, rtol=0)


def test_lora_adds_its_low_rank_update():
    layer = FusedDense(UNITS, bias_initializer="random_normal")
    x = random_floats(np.random.default_rng(2), (BATCH, WIDTH))
    layer.build(x.shape)
    kernel, bias = dense_weights(layer)
    layer.enable_lora(2, b_initializer="random_normal")
    a, b = (to_numpy(v) for v in (layer.lora_kernel_a, layer.lora_kernel_b))
    expected = x @ (kernel + a @ b * layer.lora_alpha / layer.lora_rank) + bias
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5, rtol=0)


def test_mixed_precision_computes_in_bfloat16():
    layer = FusedDense(UNITS, dtype="mixed_bfloat16")
    outputs = layer(random_floats(np.random.default_rng(3), (BATCH, WIDTH)))
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    assert layer.kernel.dtype == "float32"


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the (out, in) copy is PyTorch's")
def test_few_row_inference_copy_follows_the_kernel():
    """Decoding-sized calls without gradients read a cached (out, in) copy of the kernel: it must
    give the same outputs, and follow `assign` and `set_weights` (atol 1e-6 against NumPy)."""
    import torch

    from kbert.backend import torch_ops

    layer = FusedDense(UNITS, bias_initializer="random_normal")
    x = random_floats(np.random.default_rng(3), (BATCH, 1, WIDTH))  # 2 rows
    layer.build(x.shape)
    with torch.no_grad():
        for step in range(3):
            np.testing.assert_allclose(to_numpy(layer(x)), np_dense(x, *dense_weights(layer)), atol=1e-6)
            assert id(layer.kernel.value) in torch_ops._LINEAR_WEIGHTS
            if step == 0:
                layer.kernel.assign(layer.kernel.numpy() * -2.0)
            else:
                layer.set_weights([w + 1.0 for w in layer.get_weights()])
    copies = set(torch_ops._LINEAR_WEIGHTS)  # other layers' copies may go with them meanwhile
    layer(x)  # gradients on: the transposed view, no new copy
    many_rows = random_floats(np.random.default_rng(4), (BATCH, torch_ops.FEW_ROWS, WIDTH))
    with torch.no_grad():
        layer(many_rows)
    assert set(torch_ops._LINEAR_WEIGHTS) <= copies
    kernel_id = id(layer.kernel.value)
    del layer
    import gc

    gc.collect()
    assert kernel_id not in torch_ops._LINEAR_WEIGHTS  # dropped with its variable

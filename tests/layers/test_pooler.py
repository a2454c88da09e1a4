import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    dense_weights,
    np_dense,
    np_gelu_tanh,
    random_floats,
    run_standard_check,
    to_numpy,
)

from kbert.layers import Pooler, gelu_approximate

BATCH, LENGTH, HIDDEN = 2, 8, 16


def bert_case():
    return LayerCase(
        make_layer=lambda: Pooler(HIDDEN),
        inputs={"inputs": random_floats(np.random.default_rng(0), (BATCH, LENGTH, HIDDEN))},
        expected_shape=(BATCH, HIDDEN),
    )


def narrow_case():
    # Pooled width different from the input width, with a callable activation.
    return LayerCase(
        make_layer=lambda: Pooler(12, activation=gelu_approximate),
        inputs={"inputs": random_floats(np.random.default_rng(0), (BATCH, LENGTH, HIDDEN))},
        expected_shape=(BATCH, 12),
    )


CASES = {"bert": bert_case, "narrow_gelu": narrow_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def test_tanh_of_dense_first_token_matches_numpy():
    layer = Pooler(HIDDEN, kernel_initializer="random_normal")
    x = random_floats(np.random.default_rng(1), (BATCH, LENGTH, HIDDEN))
    outputs = to_numpy(layer(x))
    expected = np.tanh(np_dense(x[:, 0], *dense_weights(layer.dense)))
    np.testing.assert_allclose(outputs, expected, atol=1e-6, rtol=0)


def test_callable_activation_matches_numpy():
    case = narrow_case()
    layer = case.make_layer()
    x = case.inputs["inputs"]
    outputs = to_numpy(layer(x))
    expected = np_gelu_tanh(np_dense(x[:, 0], *dense_weights(layer.dense)))
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_only_the_first_token_matters():
    layer = Pooler(HIDDEN)
    x = random_floats(np.random.default_rng(2), (BATCH, LENGTH, HIDDEN))
    changed = x.copy()
    changed[:, 1:] = 0.0
    np.testing.assert_allclose(to_numpy(layer(changed)), to_numpy(layer(x)), atol=0)


def test_wrong_rank_raises():
    with pytest.raises(
        ValueError, match=r"Pooler expects inputs of shape \(batch, sequence, width\); received shape \(2, 16\)"
    ):
        Pooler(HIDDEN)(np.zeros((BATCH, HIDDEN), "float32"))

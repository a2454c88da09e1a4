import numpy as np
import pytest
from elmo_reference import np_highway
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy

from kbert.layers import Highway


def case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: Highway(num_layers=2),
        inputs={"inputs": random_floats(rng, (2, 5, 8))},
        expected_shape=(2, 5, 8),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


def test_matches_numpy_with_random_weights():
    rng = np.random.default_rng(1)
    x = random_floats(rng, (3, 4, 6), scale=2.0)
    highway = Highway(num_layers=2)
    highway.build(x.shape)
    weights = [random_floats(rng, w.shape) for w in highway.get_weights()]
    highway.set_weights(weights)
    expected = np_highway(x, list(zip(weights[0::2], weights[1::2])))
    np.testing.assert_allclose(to_numpy(highway(x)), expected, atol=1e-5, rtol=1e-5)


def test_the_gate_starts_open_to_the_input():
    highway = Highway(num_layers=1)
    highway.build((None, 4))
    bias = to_numpy(highway.highway_layers[0].bias)
    assert bias[:4].tolist() == [0.0] * 4 and bias[4:].tolist() == [1.0] * 4


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_layers"):
        Highway(num_layers=0)

import numpy as np
import pytest
from elmo_reference import np_character_cnn
from helpers import STANDARD_CHECKS, LayerCase, random_floats, random_ids, run_standard_check, to_numpy

from kbert.layers import CharacterCNN
from kbert.layers.character_cnn import ELMO_FILTERS

FILTERS = [(1, 4), (2, 3), (3, 5)]


def case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: CharacterCNN(output_dim=6, filters=FILTERS, num_characters=30, character_dim=4),
        inputs={"character_ids": random_ids(rng, (2, 3, 7), 30)},
        expected_shape=(2, 3, 6),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


def randomized_weights(layer, rng):
    """Random weights set on `layer`, by the end of their variable paths."""
    weights = [random_floats(rng, w.shape, scale=0.5) for w in layer.get_weights()]
    layer.set_weights(weights)
    paths = [w.path for w in layer.weights]
    return lambda suffix: next(value for path, value in zip(paths, weights) if path.endswith(suffix))


def test_matches_numpy_with_random_weights_and_a_padding_token():
    rng = np.random.default_rng(1)
    layer = CharacterCNN(output_dim=5, filters=FILTERS, num_characters=262, character_dim=4)
    ids = random_ids(rng, (2, 4, 9), 262)
    ids[1, 3] = 0  # a padding token: encoded like any other
    layer(ids)
    weight = randomized_weights(layer, rng)
    filters = [(weight(f"kernel_{w}"), weight(f"bias_{w}")) for w, _ in FILTERS]
    highway = [(weight(f"highway_{i}/kernel"), weight(f"highway_{i}/bias")) for i in range(2)]
    expected = np_character_cnn(ids, weight("embeddings"), filters, highway,
                                (weight("projection/kernel"), weight("projection/bias")))
    np.testing.assert_allclose(to_numpy(layer(ids)), expected, atol=1e-4, rtol=1e-4)


def test_elmo_sizes_give_2048_features():
    layer = CharacterCNN(output_dim=512)
    layer.build((None, None, 50))
    assert layer.num_features == 2048 and sum(c for _, c in ELMO_FILTERS) == 2048
    convolutions = sum(w * 16 * c + c for w, c in ELMO_FILTERS)
    expected = 262 * 16 + convolutions + 2 * (2048 * 4096 + 4096) + 2048 * 512 + 512
    assert layer.count_params() == expected == 18_037_856


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="widest filter \\(3\\) is wider than the 2 characters"):
        CharacterCNN(output_dim=4, filters=FILTERS)(np.ones((1, 2, 2), "int32"))
    with pytest.raises(ValueError, match="positive \\(width, count\\) pairs"):
        CharacterCNN(output_dim=4, filters=[(0, 3)])

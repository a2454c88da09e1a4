import keras
import numpy as np
import pytest
from helpers import to_numpy

from kbert.layers.initializers import clone_initializer


def test_clone_is_a_new_object_with_the_same_config():
    init = keras.initializers.TruncatedNormal(mean=0.0, stddev=0.02)
    clone = clone_initializer(init)
    assert clone is not init
    assert type(clone) is type(init)
    assert clone.get_config() == init.get_config()


def test_unseeded_clone_draws_different_values():
    # Why clone: an unseeded Keras initializer fixes its seed at construction,
    # so reusing one object for two weights would give them identical values.
    init = keras.initializers.TruncatedNormal(stddev=0.02)
    a = to_numpy(init((16, 16)))
    b = to_numpy(clone_initializer(init)((16, 16)))
    assert a.shape == b.shape == (16, 16)
    assert not np.allclose(a, b)
    assert np.abs(b).max() <= 2 * 0.02 + 1e-7  # still a truncated normal of std 0.02


def test_seeded_clone_keeps_the_seed():
    init = keras.initializers.GlorotUniform(seed=7)
    np.testing.assert_array_equal(to_numpy(clone_initializer(init)((4, 4))), to_numpy(init((4, 4))))


@pytest.mark.parametrize(
    "identifier", ["glorot_uniform", "zeros", {"class_name": "RandomNormal", "config": {"stddev": 0.5}}]
)
def test_accepts_names_and_configs(identifier):
    clone = clone_initializer(identifier)
    assert isinstance(clone, keras.initializers.Initializer)
    assert to_numpy(clone((3, 2))).shape == (3, 2)


def test_unknown_initializer_raises():
    with pytest.raises(ValueError, match="no_such_initializer"):
        clone_initializer("no_such_initializer")

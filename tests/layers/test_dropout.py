import keras
import numpy as np
from helpers import to_numpy

from kbert.layers.dropout import apply_dropout


def test_no_layer_call_outside_training_or_at_rate_zero():
    x = keras.ops.ones((4, 8))
    assert apply_dropout(keras.layers.Dropout(0.5), x, training=False) is x
    assert apply_dropout(keras.layers.Dropout(0.5), x, training=None) is x
    assert apply_dropout(keras.layers.Dropout(0.0), x, training=True) is x


def test_training_drops_and_rescales():
    """Kept entries are scaled by 1 / (1 - rate); with 4,096 entries some are dropped, some kept."""
    keras.utils.set_random_seed(0)
    values = to_numpy(apply_dropout(keras.layers.Dropout(0.5), keras.ops.ones((64, 64)), training=True))
    assert set(np.unique(values)) == {0.0, 2.0}

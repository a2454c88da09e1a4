"""Configs read off constructors: argument names, attribute read-back, Keras objects rebuilt."""

import keras

from kbert.serialization import attribute_config, constructor_arguments, deserialize_arguments


class _Model:
    def __init__(self, width, depth=2, *args, inner=None, **kwargs):
        self.width, self.depth, self.inner = width, depth, inner


def test_constructor_arguments_skip_self_args_and_kwargs():
    assert constructor_arguments(_Model) == ["width", "depth", "inner"]


def test_attribute_config_serializes_layers_and_round_trips():
    dense = keras.layers.Dense(3, name="head")
    config = attribute_config(_Model(4, inner=dense))
    assert config["width"] == 4 and config["depth"] == 2
    assert config["inner"]["class_name"] == "Dense"
    rebuilt = deserialize_arguments(config)
    assert isinstance(rebuilt["inner"], keras.layers.Dense) and rebuilt["inner"].units == 3
    assert rebuilt["width"] == 4


def test_skip_leaves_out_arguments():
    assert "depth" not in attribute_config(_Model(4), skip=("depth",))

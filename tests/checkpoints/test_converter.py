"""kbert.checkpoints.converter: what a family's converter implements, and the
loading steps the base class runs (checked on a toy backbone, so no
`transformers` is needed)."""

import json

import keras
import numpy as np
import pytest

from kbert.checkpoints.converter import Converter

safetensors_numpy = pytest.importorskip("safetensors.numpy")


class ToyBackbone(keras.Model):
    """A functional model with one Dense, standing in for a kbert backbone."""

    def __init__(self, width, units, **kwargs):
        inputs = keras.Input((width,))
        dense = keras.layers.Dense(units, name="dense")
        super().__init__(inputs, dense(inputs), **kwargs)
        self.projection = dense


class ToyConverter(Converter):
    model_types = ("toy",)
    task_prefix = "toy."
    backbone_class = ToyBackbone

    def config_to_arguments(self, config):
        if config.get("bad"):
            raise ValueError("bad option")
        return {"width": config["in"], "units": config["out"]}

    def sublayer_modules(self, backbone, tensors):
        return [(backbone.projection, "linear")]

    def missing_tensor_hint(self, config):
        return " (a toy hint)"


def _checkpoint(directory, config, tensors=None):
    (directory / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        safetensors_numpy.save_file(tensors, directory / "model.safetensors")


def test_load_runs_the_steps(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(2, 3)).astype("float32")  # HF Linear: [out, in]
    bias = rng.normal(size=(2,)).astype("float32")
    # A task checkpoint: the backbone under `toy.`, a head beside it.
    tensors = {"toy.linear.weight": weight, "toy.linear.bias": bias, "head.weight": bias}
    _checkpoint(tmp_path, {"in": 3, "out": 2}, tensors)
    backbone = ToyConverter().load({"in": 3, "out": 2}, tmp_path, name="toy_backbone")
    assert backbone.name == "toy_backbone"  # overrides reach the constructor
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(backbone.projection.kernel), weight.T)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(backbone.projection.bias), bias)


def test_config_errors_come_before_the_weights_are_read(tmp_path):
    _checkpoint(tmp_path, {"bad": True})  # and no weight file at all
    with pytest.raises(ValueError, match="bad option"):
        ToyConverter().load({"bad": True}, tmp_path)


def test_missing_tensor_error_carries_the_hint_and_the_directory(tmp_path):
    _checkpoint(tmp_path, {"in": 3, "out": 2}, {"toy.linear.weight": np.zeros((2, 3), "float32")})
    with pytest.raises(ValueError, match=r"in .*\(a toy hint\): linear\.bias \(shape \(2,\)\)"):
        ToyConverter().load({"in": 3, "out": 2}, tmp_path)


def test_the_base_names_what_a_subclass_implements():
    converter = Converter()
    assert repr(ToyConverter()) == "ToyConverter(toy)"
    assert converter.arguments_from_tensors({"a": 1}, {}) == {"a": 1}
    assert converter.missing_tensor_hint({}) == ""
    with pytest.raises(NotImplementedError):
        converter.config_to_arguments({})
    with pytest.raises(NotImplementedError):
        converter.weight_names(None, {})

"""The Task base and the input helpers every task shares."""

import keras
import numpy as np
import pytest

import kbert
from kbert.training.task import Task, backbone_inputs, require_keys


@keras.saving.register_keras_serializable(package="kbert_test")
class _Scorer(Task):
    def __init__(self, backbone, units=2, **kwargs):
        super().__init__(**kwargs)
        self.backbone, self.units = backbone, units
        self.head = keras.layers.Dense(units)

    def call(self, inputs):
        return self.head(self.backbone(inputs)["pooled_output"])


def test_task_config_serializes_the_backbone_and_round_trips():
    model = _Scorer(kbert.models.bert_tiny(num_layers=1, vocabulary_size=20), units=3)
    config = model.get_config()
    assert config["units"] == 3 and config["backbone"]["class_name"] == "Encoder"
    copy = _Scorer.from_config(config)
    assert copy.units == 3 and copy.backbone.num_layers == 1


def test_jit_compile_auto_is_saved_as_auto_and_resolves_again_on_load(tmp_path):
    model = _Scorer(kbert.models.bert_tiny(num_layers=1, vocabulary_size=20))
    model({name: np.ones((1, 4), "int32") for name in ("token_ids", "padding_mask", "segment_ids")})
    model.compile(optimizer="adam", loss="mse")  # jit_compile="auto": True on JAX and TensorFlow, False on PyTorch
    assert model.get_compile_config()["jit_compile"] == "auto"
    model.save(tmp_path / "auto.keras")
    loaded = keras.saving.load_model(tmp_path / "auto.keras")
    assert loaded.jit_compile == model.jit_compile and loaded.get_compile_config()["jit_compile"] == "auto"
    model.compile(optimizer="adam", loss="mse", jit_compile=False)
    assert model.get_compile_config()["jit_compile"] is False


def test_require_keys_names_what_is_missing():
    with pytest.raises(ValueError, match=r"Model targets lack \['b'\]"):
        require_keys({"a": 1}, ("a", "b"), "targets", "Model")
    with pytest.raises(ValueError, match="as a dict"):
        require_keys([1], ("a",), "inputs", "Model")


def test_backbone_inputs_fill_segments_and_drop_extras():
    backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=20)
    ids = np.ones((1, 3), "int32")
    selected = backbone_inputs(backbone, {"token_ids": ids, "padding_mask": ids, "labels": ids})
    assert sorted(selected) == ["padding_mask", "segment_ids", "token_ids"]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(selected["segment_ids"]), 0 * ids)

"""kbert.models.XLNet: the presets' exact parameter counts (transformers' XLNetModel),
the optional inputs and outputs, save/load, and the one-line errors on bad input."""

import keras
import numpy as np
import pytest

import kbert
from kbert.models import XLNet


def tiny(**overrides):
    return kbert.models.xlnet_tiny(**{"vocabulary_size": 40, "num_layers": 2, **overrides})


def batch(length=6, size=2):
    rng = np.random.default_rng(0)
    return {
        "token_ids": rng.integers(0, 40, (size, length)).astype("int32"),
        "segment_ids": (np.arange(length) >= length // 2).astype("int32")[None].repeat(size, 0),
        "padding_mask": np.ones((size, length), "int32"),
    }


def mapping(size=2, length=6, positions=(4, 1)):
    return np.eye(length, dtype="float32")[None, list(positions)].repeat(size, 0)


@pytest.mark.parametrize(
    "name, expected",
    [("xlnet_tiny", 4_525_696), ("xlnet_base", 116_718_336), ("xlnet_large", 360_268_800)],
)
def test_preset_parameter_counts_are_transformers(name, expected):
    """transformers' XLNetModel counts (mask_emb included); variables shaped, not filled."""
    builder = getattr(kbert.models, name)
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert isinstance(model, XLNet) and model.vocabulary_size == 32000
    assert model.count_params() == expected
    assert f"{expected:,}" in builder.__doc__


def test_outputs_and_optional_inputs():
    model = tiny()
    x = batch()
    plain = model(x)
    assert sorted(plain) == ["pooled_output", "sequence_output"]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(plain["pooled_output"]),
        keras.ops.convert_to_numpy(plain["sequence_output"])[:, -1],
    )
    two_stream = model({**x, "permutation_mask": np.zeros((2, 6, 6), "float32"),
                        "target_mapping": mapping()})
    assert tuple(two_stream["query_output"].shape) == (2, 2, 128)
    # No permutation: the content stream is the plain one.
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(two_stream["sequence_output"]),
        keras.ops.convert_to_numpy(plain["sequence_output"]), atol=1e-5,
    )


def test_memory_keeps_memory_length_positions():
    model = tiny(memory_length=4)
    first = model(batch())
    assert tuple(first["memory"].shape) == (2, 2, 4, 128)
    second = model({**batch(), "memory": first["memory"]})
    assert tuple(second["memory"].shape) == (2, 2, 4, 128)
    # The memory is the last positions of the previous segment's layer inputs.
    embedded = keras.ops.convert_to_numpy(model.token_embedding(batch()["token_ids"]))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(first["memory"])[:, 0], embedded[:, -4:])


def test_save_load_round_trip(tmp_path):
    model = tiny(memory_length=3)
    x = {**batch(), "target_mapping": mapping()}
    expected = model(x)
    path = tmp_path / "xlnet.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, XLNet) and loaded.memory_length == 3
    actual = loaded(x)
    for name in ("sequence_output", "query_output", "memory"):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(actual[name]), keras.ops.convert_to_numpy(expected[name])
        )


def test_predict_compiles():
    model = tiny()
    outputs = model.predict(batch(), verbose=0)
    expected = keras.ops.convert_to_numpy(model(batch())["sequence_output"])
    np.testing.assert_allclose(outputs["sequence_output"], expected, atol=1e-5)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"permutation_mask": np.zeros((2, 6, 5), "float32")}, "permutation_mask must have shape"),
        ({"target_mapping": np.full((2, 1, 6), 0.5, "float32")}, "target_mapping must be one-hot"),
        ({"target_mapping": np.zeros((2, 1, 6), "float32")}, "target_mapping must be one-hot"),
        ({"memory": np.zeros((2, 2, 3, 64), "float32")}, "memory has width 64"),
        ({"memory": np.zeros((2, 3, 3, 128), "float32")}, "memory must have shape"),
    ],
)
def test_bad_optional_inputs_get_one_line_errors(extra, message):
    with pytest.raises(ValueError, match=message) as error:
        tiny()({**batch(), **extra})
    assert "\n" not in str(error.value)

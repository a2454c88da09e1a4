import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    random_floats,
    random_ids,
    run_standard_check,
    to_numpy,
    xla_call,
)

from kbert.layers import PositionEmbedding

MAX_POSITIONS, HIDDEN, BATCH, LENGTH = 16, 16, 2, 8


def default_positions_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: PositionEmbedding(MAX_POSITIONS),
        inputs={"inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN))},
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def explicit_positions_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: PositionEmbedding(MAX_POSITIONS),
        inputs={
            "inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "positions": random_ids(rng, (BATCH, LENGTH), MAX_POSITIONS),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


CASES = {"default_positions": default_positions_case, "explicit_positions": explicit_positions_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def test_rows_match_numpy():
    rng = np.random.default_rng(1)
    layer = PositionEmbedding(MAX_POSITIONS, initializer="random_normal")
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    outputs = to_numpy(layer(x))
    table = to_numpy(layer.embeddings)
    assert table.shape == (MAX_POSITIONS, HIDDEN)
    # Rows 0..n-1, the same for every batch entry, independent of the input values.
    np.testing.assert_allclose(outputs, np.broadcast_to(table[:LENGTH], x.shape), atol=0, rtol=0)
    np.testing.assert_allclose(to_numpy(layer(2.0 * x + 5.0)), outputs, atol=0, rtol=0)

    positions = random_ids(rng, (BATCH, LENGTH), MAX_POSITIONS)
    np.testing.assert_allclose(to_numpy(layer(x, positions=positions)), table[positions], atol=0)


def test_full_table_length_is_accepted():
    layer = PositionEmbedding(MAX_POSITIONS)
    outputs = layer(np.zeros((BATCH, MAX_POSITIONS, HIDDEN), "float32"))
    np.testing.assert_allclose(to_numpy(outputs)[0], to_numpy(layer.embeddings), atol=0)


def test_wrong_rank_raises():
    with pytest.raises(
        ValueError, match=r"expects inputs of shape \(batch, sequence, width\); received shape \(2, 8\)"
    ):
        PositionEmbedding(MAX_POSITIONS)(np.zeros((BATCH, LENGTH), "float32"))


def test_sequence_longer_than_table_raises():
    layer = PositionEmbedding(MAX_POSITIONS)
    layer(np.zeros((BATCH, LENGTH, HIDDEN), "float32"))
    too_long = np.zeros((BATCH, MAX_POSITIONS + 1, HIDDEN), "float32")
    message = rf"Sequence length {MAX_POSITIONS + 1} exceeds the {MAX_POSITIONS} positions"
    with pytest.raises(ValueError, match=message):
        layer(too_long)


def test_sequence_longer_than_table_raises_when_traced():
    # Static shapes: the length is known at trace time, so XLA tracing fails clearly too.
    layer = PositionEmbedding(MAX_POSITIONS)
    layer(np.zeros((BATCH, LENGTH, HIDDEN), "float32"))
    with pytest.raises(ValueError, match=rf"exceeds the {MAX_POSITIONS} positions"):
        xla_call(layer, np.zeros((BATCH, MAX_POSITIONS + 1, HIDDEN), "float32"))


@pytest.mark.parametrize("bad_position", [MAX_POSITIONS, -1])
def test_position_ids_outside_table_raise_in_eager_mode(bad_position):
    layer = PositionEmbedding(MAX_POSITIONS)
    positions = np.zeros((BATCH, LENGTH), "int32")
    positions[0, 5] = bad_position
    message = rf"Position id {bad_position} is outside the valid range \[0, {MAX_POSITIONS}\)"
    with pytest.raises(ValueError, match=message):
        layer(np.zeros((BATCH, LENGTH, HIDDEN), "float32"), positions=positions)


def test_config_keeps_initializer():
    layer = PositionEmbedding(MAX_POSITIONS, initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    config = layer.get_config()
    assert config["max_positions"] == MAX_POSITIONS
    clone = PositionEmbedding.from_config(config)
    assert isinstance(clone.initializer, keras.initializers.TruncatedNormal)
    assert clone.initializer.stddev == 0.02

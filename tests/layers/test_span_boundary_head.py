import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    dense_weights,
    np_dense,
    np_gelu,
    np_layer_norm,
    random_floats,
    random_ids,
    run_standard_check,
    to_numpy,
)

from kbert.layers import ReversibleEmbedding
from kbert.layers.span_boundary_head import SpanBoundaryHead

VOCAB, HIDDEN, BATCH, LENGTH, PREDICTIONS = 30, 16, 2, 8, 3


def head_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
        "span_left": random_ids(rng, (BATCH, PREDICTIONS), LENGTH),
        "span_right": random_ids(rng, (BATCH, PREDICTIONS), LENGTH),
        "span_offsets": random_ids(rng, (BATCH, PREDICTIONS), 15),
    }


def make_tied_head():
    table = ReversibleEmbedding(VOCAB, HIDDEN, name="token_embedding")
    table.build(None)
    return SpanBoundaryHead(VOCAB, token_embedding=table)


def rebuild_tied(layer, config):
    """`token_embedding` is not in the config: the owner passes a table again."""
    table = ReversibleEmbedding.from_config(layer.token_embedding.get_config())
    table.build(None)
    return SpanBoundaryHead.from_config({**config, "token_embedding": table})


@keras.saving.register_keras_serializable(package="kbert_tests")
class TiedSpanHeadModel(keras.Model):
    """Owns a table and a tied `SpanBoundaryHead`, rebuilding the tie from its own config."""

    def __init__(self, vocabulary_size, sequence_length, predictions, **kwargs):
        table = ReversibleEmbedding(vocabulary_size, HIDDEN, name="token_embedding")
        table.build(None)
        head = SpanBoundaryHead(vocabulary_size, token_embedding=table, name="sbo_head")
        inputs = {"inputs": keras.Input((sequence_length, HIDDEN), name="inputs")}
        for name in ("span_left", "span_right", "span_offsets"):
            inputs[name] = keras.Input((predictions,), dtype="int32", name=name)
        outputs = head(
            inputs["inputs"], inputs["span_left"], inputs["span_right"], inputs["span_offsets"]
        )
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.predictions = predictions
        self.token_embedding = table
        self.head = head

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "predictions": self.predictions,
            "name": self.name,
        }


CASES = {
    "tied": lambda: LayerCase(
        make_layer=make_tied_head,
        inputs=head_inputs(),
        expected_shape=(BATCH, PREDICTIONS, VOCAB),
        rebuild=rebuild_tied,
        make_model=lambda case: TiedSpanHeadModel(VOCAB, LENGTH, PREDICTIONS),
    ),
    "untied_narrow": lambda: LayerCase(
        make_layer=lambda: SpanBoundaryHead(VOCAB, embedding_dim=8, position_embedding_dim=12),
        inputs=head_inputs(),
        expected_shape=(BATCH, PREDICTIONS, VOCAB),
    ),
}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def np_span_boundary_head(layer, hidden, left, right, offsets):
    """docs/algorithms.md §6: [h_{s−1}; h_{e+1}; P_k] → Linear, GELU, LN → Linear, GELU, LN → decoder."""
    hidden = hidden.astype(np.float64)
    x = np.concatenate(
        [
            np.take_along_axis(hidden, left[:, :, None], axis=1),
            np.take_along_axis(hidden, right[:, :, None], axis=1),
            to_numpy(layer.position_embedding.embeddings)[offsets],
        ],
        axis=-1,
    )
    for dense, norm in (
        (layer.hidden_dense, layer.hidden_layer_norm),
        (layer.output_dense, layer.output_layer_norm),
    ):
        x = np_gelu(np_dense(x, *dense_weights(dense)))
        x = np_layer_norm(x, to_numpy(norm.gamma), to_numpy(norm.beta), 1e-12)
    if layer.token_embedding is not None:
        decoder = to_numpy(layer.token_embedding.embeddings).astype(np.float64).T
    else:
        decoder = to_numpy(layer.decoder.kernel).astype(np.float64)
    return x @ decoder + to_numpy(layer.bias)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy_reference(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    case.call(layer, case.inputs)  # build, then give the LayerNorms and bias non-default values
    rng = np.random.default_rng(5)
    layer.bias.assign(random_floats(rng, (VOCAB,)))
    layer.hidden_layer_norm.gamma.assign(1.0 + random_floats(rng, (HIDDEN,), 0.1))
    beta = layer.output_layer_norm.beta
    beta.assign(random_floats(rng, tuple(beta.shape), 0.1))
    outputs = to_numpy(case.call(layer, case.inputs))
    inputs = case.inputs
    expected = np_span_boundary_head(
        layer, inputs["inputs"], inputs["span_left"], inputs["span_right"], inputs["span_offsets"]
    )
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_shapes_follow_spanbert():
    layer = make_tied_head()
    inputs = head_inputs()
    layer(*inputs.values())
    assert tuple(layer.position_embedding.embeddings.shape) == (15, 200)
    assert tuple(layer.hidden_dense.kernel.shape) == (2 * HIDDEN + 200, HIDDEN)
    assert tuple(layer.output_dense.kernel.shape) == (HIDDEN, HIDDEN)
    assert layer.decoder is None and layer.hidden_layer_norm.epsilon == 1e-12


def test_boundaries_and_offset_determine_the_prediction():
    """Hidden states inside the span do not matter; the offset does."""
    layer = SpanBoundaryHead(VOCAB)
    inputs = head_inputs()
    left = np.array([[0, 0, 0], [1, 1, 1]], "int32")
    right = np.array([[4, 4, 4], [6, 6, 6]], "int32")
    offsets = np.array([[0, 1, 0], [2, 2, 2]], "int32")
    first = to_numpy(layer(inputs["inputs"], left, right, offsets))
    changed = inputs["inputs"].copy()
    changed[:, 2:4] += 1.0  # inside both spans, away from their boundaries
    second = to_numpy(layer(changed, left, right, offsets))
    np.testing.assert_allclose(first, second, atol=1e-6)
    np.testing.assert_allclose(first[0, 0], first[0, 2], atol=1e-6)
    assert not np.allclose(first[0, 0], first[0, 1])


def test_span_offset_outside_the_table_raises():
    inputs = head_inputs()
    inputs["span_offsets"][0, 1] = 15
    with pytest.raises(ValueError, match=r"Span offset 15 is outside the valid range \[0, 15\)"):
        SpanBoundaryHead(VOCAB)(*inputs.values())


def test_span_boundary_outside_the_sequence_raises():
    inputs = head_inputs()
    inputs["span_right"][1, 0] = LENGTH
    with pytest.raises(ValueError, match=rf"Span boundary position {LENGTH} is outside"):
        SpanBoundaryHead(VOCAB)(*inputs.values())


def test_span_inputs_of_wrong_rank_raise():
    inputs = head_inputs()
    inputs["span_left"] = inputs["span_left"][0]
    with pytest.raises(ValueError, match=r"span_left must have shape \(batch, predictions\); received shape \(3,\)"):
        SpanBoundaryHead(VOCAB)(*inputs.values())


def test_tied_table_of_wrong_vocabulary_size_raises():
    table = ReversibleEmbedding(VOCAB + 1, HIDDEN)
    with pytest.raises(ValueError, match=rf"token_embedding has {VOCAB + 1} rows but vocabulary_size is {VOCAB}"):
        SpanBoundaryHead(VOCAB, token_embedding=table)

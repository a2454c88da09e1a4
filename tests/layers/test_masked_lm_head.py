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

from kbert.layers import MaskedLMHead, ReversibleEmbedding

VOCAB, HIDDEN, BATCH, LENGTH, PREDICTIONS = 30, 16, 2, 8, 3


def head_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
        "mask_positions": random_ids(rng, (BATCH, PREDICTIONS), LENGTH),
    }


def make_tied_head(embedding_dim=HIDDEN):
    table = ReversibleEmbedding(VOCAB, embedding_dim, name="token_embedding")
    table.build(None)
    return MaskedLMHead(VOCAB, token_embedding=table)


def rebuild_tied(layer, config):
    """`token_embedding` is not in the config: the owner passes a table again."""
    table = ReversibleEmbedding.from_config(layer.token_embedding.get_config())
    table.build(None)
    return MaskedLMHead.from_config({**config, "token_embedding": table})


@keras.saving.register_keras_serializable(package="kbert_tests")
class TiedHeadModel(keras.Model):
    """A model owning both the table and the tied head, the pattern `MaskedLMHead` documents.

    A functional model cannot rebuild the tie from configs alone, so the owner
    re-creates the table and passes it to the head in its constructor.
    """

    def __init__(self, vocabulary_size, embedding_dim, sequence_length, predictions, **kwargs):
        table = ReversibleEmbedding(vocabulary_size, embedding_dim, name="token_embedding")
        table.build(None)
        head = MaskedLMHead(vocabulary_size, token_embedding=table, name="mlm_head")
        inputs = {
            "inputs": keras.Input((sequence_length, HIDDEN), name="inputs"),
            "mask_positions": keras.Input((predictions,), dtype="int32", name="mask_positions"),
        }
        outputs = head(inputs["inputs"], inputs["mask_positions"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.sequence_length = sequence_length
        self.predictions = predictions
        self.token_embedding = table
        self.head = head

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "embedding_dim": self.embedding_dim,
            "sequence_length": self.sequence_length,
            "predictions": self.predictions,
            "name": self.name,
        }


def tied_case(embedding_dim=HIDDEN):
    return LayerCase(
        make_layer=lambda: make_tied_head(embedding_dim),
        inputs=head_inputs(),
        expected_shape=(BATCH, PREDICTIONS, VOCAB),
        rebuild=rebuild_tied,
        make_model=lambda case: TiedHeadModel(VOCAB, embedding_dim, LENGTH, PREDICTIONS),
    )


def untied_case():
    return LayerCase(
        make_layer=lambda: MaskedLMHead(VOCAB),
        inputs=head_inputs(),
        expected_shape=(BATCH, PREDICTIONS, VOCAB),
    )


def untied_narrow_case():
    return LayerCase(
        make_layer=lambda: MaskedLMHead(VOCAB, embedding_dim=8),
        inputs=head_inputs(),
        expected_shape=(BATCH, PREDICTIONS, VOCAB),
    )


CASES = {
    "tied": tied_case,
    "tied_factorized": lambda: tied_case(embedding_dim=8),  # ALBERT / ELECTRA generator: H -> E
    "untied": untied_case,
    "untied_narrow": untied_narrow_case,
}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def np_masked_lm_head(layer, hidden, positions):
    """Gather -> Dense + exact GELU -> LayerNorm(1e-12) -> table transposed (or decoder) + bias."""
    gathered = np.take_along_axis(hidden.astype(np.float64), positions[:, :, None], axis=1)
    x = np_gelu(np_dense(gathered, *dense_weights(layer.transform)))
    x = np_layer_norm(x, to_numpy(layer.layer_norm.gamma), to_numpy(layer.layer_norm.beta), 1e-12)
    if layer.token_embedding is not None:
        decoder = to_numpy(layer.token_embedding.embeddings).astype(np.float64).T
    else:
        decoder = to_numpy(layer.decoder.kernel).astype(np.float64)
    return x @ decoder + to_numpy(layer.bias)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy_reference(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    case.call(layer, case.inputs)  # build, then give the bias non-zero values
    layer.bias.assign(random_floats(np.random.default_rng(5), (VOCAB,)))
    outputs = to_numpy(case.call(layer, case.inputs))
    expected = np_masked_lm_head(layer, case.inputs["inputs"], case.inputs["mask_positions"])
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_tied_head_shares_the_table():
    head = make_tied_head()
    table = head.token_embedding
    inputs = head_inputs()
    head(inputs["inputs"], inputs["mask_positions"])
    assert head.decoder is None
    assert any(v is table.embeddings for v in head.weights)
    assert len(head.weights) == 6  # bias, transform (2), layer norm (2), the shared table
    before = to_numpy(head(inputs["inputs"], inputs["mask_positions"]))
    table.embeddings.assign(2.0 * table.embeddings)
    after = to_numpy(head(inputs["inputs"], inputs["mask_positions"]))
    np.testing.assert_allclose(after, 2.0 * before, atol=1e-5, rtol=1e-5)  # bias is 0


def test_bias_starts_at_zero():
    head = MaskedLMHead(VOCAB)
    inputs = head_inputs()
    head(inputs["inputs"], inputs["mask_positions"])
    np.testing.assert_array_equal(to_numpy(head.bias), np.zeros(VOCAB))


def test_tied_head_transform_width_is_table_width():
    head = make_tied_head(embedding_dim=8)
    inputs = head_inputs()
    head(inputs["inputs"], inputs["mask_positions"])
    assert tuple(head.transform.kernel.shape) == (HIDDEN, 8)
    assert head.get_config()["embedding_dim"] == 8


def test_positions_select_rows():
    head = MaskedLMHead(VOCAB)
    x = random_floats(np.random.default_rng(6), (BATCH, LENGTH, HIDDEN))
    positions = np.array([[0, 7, 7], [3, 0, 5]], "int32")
    logits = to_numpy(head(x, positions))
    np.testing.assert_allclose(logits[0, 1], logits[0, 2], atol=0)
    single = to_numpy(head(x[1:], np.array([[5, 5, 5]], "int32")))
    np.testing.assert_allclose(logits[1, 2], single[0, 0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("bad_position", [LENGTH, -1])
def test_positions_outside_sequence_raise(bad_position):
    head = MaskedLMHead(VOCAB)
    positions = np.zeros((BATCH, PREDICTIONS), "int32")
    positions[1, 2] = bad_position
    message = rf"Mask position {bad_position} is outside the valid range \[0, {LENGTH}\)"
    with pytest.raises(ValueError, match=message):
        head(np.zeros((BATCH, LENGTH, HIDDEN), "float32"), positions)


def test_tied_table_of_wrong_vocabulary_size_raises():
    table = ReversibleEmbedding(VOCAB + 1, HIDDEN)
    with pytest.raises(ValueError, match=rf"token_embedding has {VOCAB + 1} rows but vocabulary_size is {VOCAB}"):
        MaskedLMHead(VOCAB, token_embedding=table)


def test_inputs_of_wrong_rank_raise():
    with pytest.raises(
        ValueError, match=r"MaskedLMHead expects inputs of shape \(batch, sequence, hidden\); received shape \(2, 16\)"
    ):
        MaskedLMHead(VOCAB)(np.zeros((BATCH, HIDDEN), "float32"), np.zeros((BATCH, PREDICTIONS), "int32"))


def test_mask_positions_of_wrong_rank_raise():
    with pytest.raises(
        ValueError, match=r"mask_positions must have shape \(batch, predictions\); received shape \(2,\)"
    ):
        MaskedLMHead(VOCAB)(np.zeros((BATCH, LENGTH, HIDDEN), "float32"), np.zeros((BATCH,), "int32"))

"""`predict_by_length` against the full-length path: every task type, every backend, to 1e-5.

Rows of 64 tokens with 3 to 64 real ones fall into the buckets 16 and 64
(docs/algorithms.md §25); padding is masked, so each row's outputs must equal
those of the model called on the rows packed to 64, in input order. XLNet reads
rows padded on the left; BigBird past its full-attention length keeps the full
length (its random plan is drawn per padded length).
"""

import keras
import numpy as np
import pytest

import kbert
from kbert.pretraining import BertPretrainer
from kbert.tasks import MultipleChoice, SpanQuestionAnswering, TextClassifier, TokenClassifier
from kbert.text.last_token_layout import layout_for
from kbert.text.length_buckets import bucket_lengths, model_bucket_lengths
from kbert.training import predict_by_length

VOCABULARY, LENGTH, ROWS, BATCH = 40, 64, 8, 4
# Sorted, the first batch of 4 (3 to 14 tokens) takes bucket 16, the second (33 to 64) the full length.
LENGTHS = [3, 9, 12, 14, 33, 40, 50, LENGTH]
TOLERANCE = 1e-5


def _encoder(**overrides):
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                 max_positions=LENGTH + 4, dropout=0.0)
    return kbert.models.Encoder(**{**sizes, **overrides})


def _inputs(seed, shape=(ROWS,)):
    """Right-padded rows of `LENGTH` with `LENGTHS` real tokens in a random order, a [CLS]=1 first
    (with choices, the second and third one or two tokens shorter)."""
    rng = np.random.default_rng(seed)
    lengths = rng.permutation(LENGTHS).reshape(-1, *[1] * (len(shape) - 1))
    lengths = np.maximum(lengths - np.arange(shape[1] if len(shape) > 1 else 1), 2).reshape(shape)
    padding_mask = (np.arange(LENGTH) < lengths[..., None]).astype("int32")
    token_ids = rng.integers(3, VOCABULARY, size=(*shape, LENGTH)).astype("int32")
    token_ids[..., 0] = 1
    return {"token_ids": token_ids * padding_mask, "padding_mask": padding_mask,
            "segment_ids": ((np.arange(LENGTH) >= 5) * padding_mask).astype("int32")}


def _classifier():
    return TextClassifier(_encoder(), 3, dropout=0.0), _inputs(0)


def _xlnet_classifier():
    backbone = kbert.models.xlnet_tiny(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16,
                                       intermediate_dim=32, dropout=0.0)
    model = TextClassifier(backbone, 3, hidden_activation="tanh", dropout=0.0)
    return model, layout_for(backbone, _inputs(1))


def _longformer_classifier():
    backbone = _encoder(attention="longformer", attention_kwargs={"window": 4})
    return TextClassifier(backbone, 3, dropout=0.0), _inputs(2)


def _tagger():
    return TokenClassifier(_encoder(), 4, dropout=0.0), _inputs(3)


def _reader():
    inputs = _inputs(4)
    inputs["question_mask"] = ((np.arange(LENGTH) < 4) * inputs["padding_mask"]).astype("int32")
    return SpanQuestionAnswering(_encoder(use_pooler=False)), inputs


def _chooser():
    return MultipleChoice(_encoder(), 3, dropout=0.0), _inputs(5, (ROWS, 3))


def _masked_lm():
    inputs = _inputs(6)
    inputs["mask_positions"] = np.array([[1, 2]] * ROWS, "int32")
    return BertPretrainer(_encoder(), pair_objective=None), inputs


CASES = {
    "classifier": (_classifier, ()),
    "xlnet classifier": (_xlnet_classifier, ()),
    "longformer classifier": (_longformer_classifier, ()),
    "tagger": (_tagger, True),
    "question answering": (_reader, ("start_logits", "end_logits")),
    "multiple choice": (_chooser, ()),
    "masked lm": (_masked_lm, ()),
}


@pytest.mark.parametrize("case", CASES)
def test_bucketed_outputs_equal_the_full_length_path(case):
    build, sequence_outputs = CASES[case]
    model, inputs = build()
    expected = keras.tree.map_structure(keras.ops.convert_to_numpy, model(inputs, training=False))  # eager
    lengths, predict_on_batch = [], model.predict_on_batch
    model.predict_on_batch = lambda batch: lengths.append(batch["token_ids"].shape[-1]) or predict_on_batch(batch)
    actual = predict_by_length(model, inputs, batch_size=BATCH, sequence_outputs=sequence_outputs)
    assert lengths == [16, LENGTH]
    if not isinstance(expected, dict):
        expected, actual = {"": expected}, {"": actual}
    assert sorted(actual) == sorted(expected)
    for name in expected:
        mine, theirs = np.asarray(actual[name]), np.asarray(expected[name])
        assert mine.shape == theirs.shape, name
        if sequence_outputs:  # padding positions come back as zeros: compare the real tokens
            keep = inputs["padding_mask"].astype(bool)
            mine, theirs = mine[keep], theirs[keep]
        np.testing.assert_allclose(mine, theirs, atol=TOLERANCE, rtol=0, err_msg=name)


@pytest.mark.backend_independent
def test_bigbird_keeps_its_planned_length():
    sparse = _encoder(attention="bigbird", attention_kwargs={"block_size": 2, "num_random_blocks": 1})
    assert model_bucket_lengths(sparse, LENGTH) == [LENGTH]  # past (5 + 2·1)·2 = 14 tokens
    assert model_bucket_lengths(sparse, 14) == bucket_lengths(14) == [14]
    assert model_bucket_lengths(_encoder(), LENGTH) == [16, 32, LENGTH]


class _RowSums:
    """A stand-in model: each row's sum of token ids, and the batch shapes it was called on."""

    predict_function = None

    def __init__(self, jit_compile):
        self.jit_compile, self.shapes = jit_compile, []

    def predict_on_batch(self, batch):
        self.shapes.append(batch["token_ids"].shape)
        return batch["token_ids"].sum(axis=-1)


@pytest.mark.backend_independent  # NumPy around a stand-in model; the real models above run on every backend
@pytest.mark.parametrize("jit_compile, rows", [(True, [4, 4]), (False, [4, 3])])
def test_a_compiled_predict_gets_its_short_batch_padded_to_a_power_of_two_rows(jit_compile, rows):
    inputs = {name: value[:7] for name, value in _inputs(7).items()}
    model = _RowSums(jit_compile)
    sums = predict_by_length(model, inputs, batch_size=BATCH)
    np.testing.assert_array_equal(sums, inputs["token_ids"].sum(axis=-1))  # the padding rows are dropped
    assert [shape[0] for shape in model.shapes] == rows

"""A backbone's two ways through, named and kept equal: the functional graph and `run_layers` directly.

`Backbone.bypasses_graph` sends a call around the functional graph when
nothing is padded (the padding masks left out: the attention kernel gets no
mask tensor) or, on the encoders, when a `head_mask` comes with the inputs
(docs/architecture.md §3). Both ways must compute the same function, in
float32, to 1e-5: unpadded against masks of ones, and a head mask of ones
against none on padded rows, for every family with two ways.
"""

import numpy as np
import pytest
from helpers import to_numpy

import kbert

TOLERANCE = 1e-5
BATCH, LENGTH = 2, 8
SIZES = dict(num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0)


def _ids(shape=(BATCH, LENGTH)):
    return np.random.default_rng(0).integers(3, 30, shape).astype("int32")


def _encoder(**attention):
    return kbert.models.Encoder(vocabulary_size=30, num_layers=1, max_positions=16, **SIZES, **attention)


ENCODERS = {
    "dense": {},
    "bigbird": {"attention": "bigbird", "attention_kwargs": {"block_size": 2, "num_random_blocks": 1}},
    "longformer": {"attention": "longformer", "attention_kwargs": {"window": 2}},
}
# family -> (model maker, inputs without masks, {padding mask: the token ids it masks}, compared output)
FAMILIES = {
    **{f"encoder_{name}": (lambda attention=attention: _encoder(**attention),
                           {"token_ids": _ids(), "segment_ids": np.zeros((BATCH, LENGTH), "int32")},
                           {"padding_mask": "token_ids"}, "sequence_output") for name, attention in ENCODERS.items()},
    "gpt2": (lambda: kbert.models.GPT2(vocabulary_size=30, num_layers=1, max_positions=16, end_id=0, **SIZES),
             {"token_ids": _ids()}, {"padding_mask": "token_ids"}, "logits"),
    "bart": (lambda: kbert.models.BART(vocabulary_size=30, num_layers=1, max_positions=16, **SIZES),
             {"encoder_token_ids": _ids(), "decoder_token_ids": _ids((BATCH, 4))},
             {"encoder_padding_mask": "encoder_token_ids", "decoder_padding_mask": "decoder_token_ids"}, "logits"),
}


def _close(actual, expected):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_unpadded_inputs_go_around_the_graph_and_equal_it(family):
    make, inputs, masks, output = FAMILIES[family]
    model = make()
    ones = {mask: np.ones_like(inputs[ids]) for mask, ids in masks.items()}
    assert model.bypasses_graph(inputs) and not model.bypasses_graph({**inputs, **ones})
    _close(model(inputs)[output], model({**inputs, **ones})[output])


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_a_head_mask_of_ones_goes_around_the_graph_and_equals_it_on_padded_rows(name):
    model = _encoder(**ENCODERS[name])
    padding_mask = (np.arange(LENGTH) < np.array([[LENGTH], [LENGTH - 3]])).astype("int32")
    inputs = {"token_ids": _ids() * padding_mask, "segment_ids": np.zeros((BATCH, LENGTH), "int32"),
              "padding_mask": padding_mask}
    head_mask = np.ones((1, SIZES["num_heads"]), "float32")
    assert model.bypasses_graph({**inputs, "head_mask": head_mask}) and not model.bypasses_graph(inputs)
    real = padding_mask.astype(bool)
    _close(to_numpy(model({**inputs, "head_mask": head_mask})["sequence_output"])[real],
           to_numpy(model(inputs)["sequence_output"])[real])

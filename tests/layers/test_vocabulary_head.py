"""The decoder-plus-bias base of the output heads, against NumPy."""

import numpy as np
import pytest
from helpers import random_floats, to_numpy

from kbert.layers import ReversibleEmbedding, VocabularyHead

VOCAB, WIDTH = 11, 4


def built_head(token_embedding=None):
    head = VocabularyHead(VOCAB, token_embedding=token_embedding)
    head.build_decoder(WIDTH)
    head.bias.assign(np.linspace(-1.0, 1.0, VOCAB).astype("float32"))
    return head


def test_tied_decode_is_the_transposed_table_plus_bias():
    table = ReversibleEmbedding(VOCAB, WIDTH)
    table.build(None)
    head = built_head(table)
    x = random_floats(np.random.default_rng(0), (2, 3, WIDTH))
    expected = x @ to_numpy(table.embeddings).T + to_numpy(head.bias)
    np.testing.assert_allclose(to_numpy(head.decode(x)), expected, atol=1e-5, rtol=0)
    assert head.decoder is None and head.embedding_dim == WIDTH


def test_untied_decode_owns_a_bias_free_decoder():
    head = built_head()
    x = random_floats(np.random.default_rng(1), (2, 3, WIDTH))
    expected = x @ to_numpy(head.decoder.kernel) + to_numpy(head.bias)
    np.testing.assert_allclose(to_numpy(head.decode(x)), expected, atol=1e-5, rtol=0)
    assert head.decoder.bias is None
    assert len(head.weights) == 2


def test_config_round_trip_leaves_the_table_out():
    head = VocabularyHead(VOCAB, embedding_dim=WIDTH, activation="relu", layer_norm_epsilon=1e-6)
    config = head.get_config()
    assert "token_embedding" not in config
    assert VocabularyHead.from_config(config).get_config() == config


def test_a_table_of_another_vocabulary_is_rejected():
    table = ReversibleEmbedding(VOCAB + 1, WIDTH)
    with pytest.raises(ValueError, match="vocabulary_size"):
        VocabularyHead(VOCAB, token_embedding=table)


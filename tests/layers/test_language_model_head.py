"""LanguageModelHead: hidden states to vocabulary logits plus a bias, tied or untied, against NumPy."""

import numpy as np
import pytest
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy

from kbert.layers import LanguageModelHead, ReversibleEmbedding

VOCAB, WIDTH = 11, 4


def untied_case():
    return LayerCase(
        make_layer=lambda: LanguageModelHead(VOCAB),
        inputs={"inputs": random_floats(np.random.default_rng(0), (2, 3, WIDTH))},
        expected_shape=(2, 3, VOCAB),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, untied_case(), tmp_path)


def test_tied_logits_are_the_transposed_table_plus_the_bias():
    # Tolerance 1e-5: float32 products of width 4.
    table = ReversibleEmbedding(VOCAB, WIDTH)
    table.build(None)
    head = LanguageModelHead(VOCAB, token_embedding=table)
    x = random_floats(np.random.default_rng(1), (2, 3, WIDTH))
    head.build(x.shape)
    head.bias.assign(np.linspace(-1.0, 1.0, VOCAB).astype("float32"))
    expected = x @ to_numpy(table.embeddings).T + np.linspace(-1.0, 1.0, VOCAB)
    np.testing.assert_allclose(to_numpy(head(x)), expected, atol=1e-5, rtol=0)
    assert head.decoder is None


def test_untied_logits_use_its_own_decoder():
    head = LanguageModelHead(VOCAB)
    x = random_floats(np.random.default_rng(2), (2, 3, WIDTH))
    head.build(x.shape)
    head.bias.assign(np.ones(VOCAB, "float32"))
    expected = x @ to_numpy(head.decoder.kernel) + 1.0
    np.testing.assert_allclose(to_numpy(head(x)), expected, atol=1e-5, rtol=0)


def test_config_has_no_transform_arguments():
    config = LanguageModelHead(VOCAB).get_config()
    assert not {"embedding_dim", "activation", "layer_norm_epsilon"} & set(config)
    assert LanguageModelHead.from_config(config).get_config() == config

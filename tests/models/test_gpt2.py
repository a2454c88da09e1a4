"""The GPT-2 backbone: the backbone harness; a NumPy forward pass, left padding, the key/value cache, init.

Its Hugging Face parity is in tests/checkpoints/test_gpt2_converter.py.
"""

import keras
import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, causal_harness_inputs, run_backbone_check
from helpers import (
    assert_close,
    dense_weights,
    np_dense,
    np_gelu_tanh,
    np_layer_norm,
    np_softmax,
    to_numpy,
)

import kbert
from kbert.models import GPT2

TINY = dict(
    vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24,
    max_positions=32, end_id=0,
)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    gpt2 = GPT2(**TINY, dropout=0.0)
    # Larger biases and LayerNorm weights than the init's, so that every one counts.
    rng = np.random.default_rng(0)
    for variable in gpt2.weights:
        if "embedding" not in variable.path:
            variable.assign(to_numpy(variable) + rng.normal(0, 0.2, variable.shape))
    return gpt2


def batch():
    rng = np.random.default_rng(1)
    token_ids = rng.integers(1, 40, (3, 7)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, :3] = 0  # left padding
    padding_mask[2, :1] = 0
    token_ids[padding_mask == 0] = 0
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def np_block(block, x, mask, epsilon):
    """`x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`, with NumPy (float64)."""
    attention = block.attention_layer
    heads, width = attention.num_heads, x.shape[-1]

    def norm(layer, x):
        return np_layer_norm(x, to_numpy(layer.gamma), to_numpy(layer.beta), epsilon)

    def split(y):
        return y.reshape(x.shape[0], x.shape[1], heads, width // heads).transpose(0, 2, 1, 3)

    normalized = norm(block.attention_layer_norm, x)
    q, k, v = (
        split(np_dense(normalized, *dense_weights(getattr(attention, f"{name}_dense"))))
        for name in ("query", "key", "value")
    )
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(width // heads)
    scores = np.where(mask[:, None], scores, -np.inf)
    context = (np_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = x + np_dense(context, *dense_weights(attention.output_dense))
    hidden = np_gelu_tanh(np_dense(norm(block.output_layer_norm, x), *dense_weights(block.intermediate_dense)))
    return x + np_dense(hidden, *dense_weights(block.output_dense))


def np_gpt2(model, token_ids, padding_mask):
    """Logits of each row run alone with its padding cut off (positions from 0)."""
    table = to_numpy(model.token_embedding.embeddings).astype(np.float64)
    positions = to_numpy(model.position_embedding.embeddings)
    rows = []
    for ids, row_mask in zip(token_ids, padding_mask):
        ids = ids[row_mask == 1]
        x = (table[ids] + positions[: len(ids)])[None]
        causal = np.tril(np.ones((len(ids), len(ids)), bool))[None]
        for block in model.transformer_layers:
            x = np_block(block, x, causal, model.layer_norm_epsilon)
        norm = model.final_layer_norm
        x = np_layer_norm(x, to_numpy(norm.gamma), to_numpy(norm.beta), model.layer_norm_epsilon)
        rows.append((x @ table.T)[0])
    return rows


def test_logits_equal_numpy_on_a_left_padded_batch(model):
    inputs = batch()
    outputs = to_numpy(model(inputs))
    assert sorted(outputs) == ["logits", "sequence_output"]
    assert outputs["logits"].shape == (3, 7, 40) and outputs["sequence_output"].shape == (3, 7, 16)
    assert np.isfinite(outputs["logits"]).all()  # padded positions included
    for row, expected in enumerate(np_gpt2(model, inputs["token_ids"], inputs["padding_mask"])):
        real = inputs["padding_mask"][row] == 1
        np.testing.assert_allclose(outputs["logits"][row][real], expected, atol=1e-4)


def test_cached_steps_equal_the_whole_sequence(model):
    inputs = batch()
    expected = to_numpy(model(inputs)["logits"])
    caches = model.attention_caches(3, 9)  # two spare positions
    mask = np.concatenate([inputs["padding_mask"], np.ones((3, 2), "int32")], axis=1)
    logits, caches = model.call_with_cache(inputs["token_ids"][:, :4], mask, caches, 0)
    assert_close(logits, expected[:, :4], atol=1e-5)
    for index in range(4, 7):
        step, caches = model.call_with_cache(
            inputs["token_ids"][:, index : index + 1], mask, caches, index
        )
        assert_close(step[:, 0], expected[:, index], atol=1e-5)
    assert len(caches) == 2 and tuple(caches[0].shape) == (3, 2, 2, 9, 8)


def test_cache_filled_without_logits_is_the_same(model):
    """`logits=False` (a prompt before decoding) skips the head and writes the same caches."""
    inputs = batch()
    mask = np.concatenate([inputs["padding_mask"], np.ones((3, 2), "int32")], axis=1)
    _, expected = model.call_with_cache(inputs["token_ids"], mask, model.attention_caches(3, 9), 0)
    logits, caches = model.call_with_cache(
        inputs["token_ids"], mask, model.attention_caches(3, 9), 0, logits=False
    )
    assert logits is None
    for cache, reference in zip(caches, expected):
        np.testing.assert_array_equal(to_numpy(cache), to_numpy(reference))


def test_initialization_scales_the_residual_projections():
    keras.utils.set_random_seed(0)
    gpt2 = GPT2(vocabulary_size=64, num_layers=8, num_heads=4, hidden_dim=128,
                intermediate_dim=512, max_positions=64, end_id=0)
    block = gpt2.transformer_layers[0]
    residual = 0.02 / np.sqrt(16)
    for layer, std in [
        (gpt2.token_embedding, 0.02),
        (block.attention_layer.query_dense, 0.02),
        (block.intermediate_dense, 0.02),
        (block.attention_layer.output_dense, residual),
        (block.output_dense, residual),
    ]:
        weights = to_numpy(layer.embeddings if hasattr(layer, "embeddings") else layer.kernel)
        assert abs(weights.std() - std) < 0.05 * std, layer.name
    assert np.all(to_numpy(block.attention_layer.query_dense.bias) == 0)


@pytest.mark.parametrize("check", BACKBONE_CHECKS)
def test_backbone_harness(check, tmp_path):
    # One layer: the smallest GPT-2 that takes every check's path (torch.compile traces each layer).
    case = BackboneCase(lambda: GPT2(**{**TINY, "num_layers": 1}), causal_harness_inputs)
    run_backbone_check(check, case, tmp_path)


def test_builder_overrides_and_errors():
    small = kbert.models.gpt2_base(num_layers=1, vocabulary_size=60, hidden_dim=16, num_heads=2,
                                   intermediate_dim=32, max_positions=8, end_id=59)
    assert isinstance(small, GPT2) and small.name == "gpt2_base" and small.pad_id == 59
    with pytest.raises(ValueError, match="divisible"):
        GPT2(**{**TINY, "num_heads": 3})
    with pytest.raises(ValueError, match="end_id"):
        GPT2(**{**TINY, "end_id": 40})
    with pytest.raises(ValueError, match="Position id"):
        small({"token_ids": np.ones((1, 9), "int32"), "padding_mask": np.ones((1, 9), "int32")})

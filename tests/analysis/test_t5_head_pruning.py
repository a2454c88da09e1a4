"""prune_heads on T5: the encoder's and the decoder's self-attention and the cross-attention
give the outputs of the head-masked model (`run_layers`' head masks, themselves checked
against transformers in test_t5_head_mask.py), the relative position bias keeps the columns
some layer still reads, incremental decoding, a task, pruning twice, a .keras round trip."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

import kbert
from kbert.analysis import prune_heads
from kbert.models import seq2seq_inputs

LAYERS, DECODER_LAYERS, HEADS, HIDDEN, KEY_DIM, BUCKETS = 2, 3, 3, 12, 4, 8
PER_HEAD = 4 * HIDDEN * KEY_DIM  # q, k and v columns and o rows; T5 has no biases
# float32 round-off only: measured 0 on TensorFlow and JAX, up to 3e-5 on PyTorch (whose
# CPU matmuls sum in another order at the pruned widths), on logits up to about 10.
TOLERANCE = 1e-4

TO_PRUNE = {
    "encoder": {0: [1], 1: [0, 2]},
    "decoder": {0: [2], 2: [0, 1]},
    "cross_attention": {1: [0, 1], 2: [1]},
}
OUTPUTS = ("encoder_sequence_output", "decoder_sequence_output", "logits")


def tiny_t5(**overrides):
    return kbert.models.T5(
        vocabulary_size=40, num_layers=LAYERS, num_decoder_layers=DECODER_LAYERS,
        num_heads=HEADS, hidden_dim=HIDDEN, intermediate_dim=16, num_buckets=BUCKETS,
        max_distance=16, dropout=0.0, initializer_factor=3.0, **overrides,
    )


def batch():
    rng = np.random.default_rng(0)
    encoder = rng.integers(2, 40, (2, 7)).astype("int32")
    encoder[1, 5:] = 0
    targets = rng.integers(2, 40, (2, 5)).astype("int32")
    targets[1, 3:] = 0
    return seq2seq_inputs(encoder, targets)


def head_masks(heads_to_prune):
    """`run_layers`' three head masks, 0 on `heads_to_prune`'s heads."""
    masks = {}
    for stack, name, layers in (("encoder", "encoder_head_mask", LAYERS),
                                ("decoder", "decoder_head_mask", DECODER_LAYERS),
                                ("cross_attention", "cross_attention_head_mask", DECODER_LAYERS)):
        mask = np.ones((layers, HEADS), "float32")
        for layer, heads in heads_to_prune.get(stack, {}).items():
            mask[layer, heads] = 0.0
        masks[name] = mask
    return masks


def assert_outputs_equal(pruned, model, heads_to_prune):
    expected = model.with_internals(False, False)({**batch(), **head_masks(heads_to_prune)})
    outputs = pruned(batch())
    for name in OUTPUTS:
        np.testing.assert_allclose(to_numpy(outputs[name]), to_numpy(expected[name]),
                                   atol=TOLERANCE, rtol=0, err_msg=name)


@pytest.mark.slow(reason="T5 at several head counts: JAX compiles each eager operation per shape")
def test_pruned_t5_equals_the_head_masked_model_and_saves(tmp_path):
    model = tiny_t5()
    pruned = prune_heads(model, TO_PRUNE)
    # Every bias column is still read by some layer, so the tables stay whole.
    assert pruned.encoder_layer_heads == [[0, 2], [1]]
    assert pruned.decoder_layer_heads == [[0, 1], [0, 1, 2], [2]]
    assert pruned.cross_attention_heads_per_layer == [3, 1, 2]
    removed = sum(len(heads) for stack in TO_PRUNE.values() for heads in stack.values())
    assert model.count_params() - pruned.count_params() == removed * PER_HEAD
    assert_outputs_equal(pruned, model, TO_PRUNE)
    plain = model(batch())["logits"]
    assert not np.allclose(to_numpy(pruned(batch())["logits"]), to_numpy(plain), atol=1e-3)
    pruned.save(tmp_path / "pruned.keras")
    restored = keras.saving.load_model(tmp_path / "pruned.keras")
    assert restored.get_config() == pruned.get_config()
    for name in OUTPUTS:
        np.testing.assert_array_equal(to_numpy(restored(batch())[name]),
                                      to_numpy(pruned(batch())[name]))


def test_a_head_pruned_in_every_layer_leaves_the_position_bias_table():
    to_prune = {"encoder": {0: [1], 1: [1, 2]}, "decoder": {0: [0], 1: [0], 2: [0]}}
    model = tiny_t5()
    pruned = prune_heads(model, to_prune)
    # Encoder column 1 and decoder column 0 are read by no layer any more.
    assert pruned.encoder_layer_heads == [[0, 1], [0]]
    assert pruned.decoder_layer_heads == [[0, 1]] * DECODER_LAYERS
    assert tuple(pruned.encoder_position_bias.embeddings.shape) == (BUCKETS, 2)
    assert tuple(pruned.decoder_position_bias.embeddings.shape) == (BUCKETS, 2)
    np.testing.assert_array_equal(to_numpy(pruned.encoder_position_bias.embeddings),
                                  to_numpy(model.encoder_position_bias.embeddings)[:, [0, 2]])
    assert model.count_params() - pruned.count_params() == 6 * PER_HEAD + 2 * BUCKETS
    assert_outputs_equal(pruned, model, to_prune)


def test_pruning_twice_numbers_heads_as_the_layer_has_them_now():
    model = tiny_t5()
    once = prune_heads(model, {"encoder": {0: [1]}, "decoder": {1: [0]}})
    twice = prune_heads(once, {"encoder": {0: [0], 1: [1]}, "decoder": {1: [1]}})
    # Encoder layer 0 kept heads [0, 2] (its heads 0 and 1 now): column 2 is left; layer 1
    # keeps 0 and 2, so no layer reads column 1 and columns 0, 2 become 0, 1.
    assert twice.encoder_layer_heads == [[1], [0, 1]]
    assert tuple(twice.encoder_position_bias.embeddings.shape) == (BUCKETS, 2)
    assert twice.decoder_layer_heads == [[0, 1, 2], [1], [0, 1, 2]]
    assert_outputs_equal(twice, model, {"encoder": {0: [0, 1], 1: [1]}, "decoder": {1: [0, 2]}})


def test_int_keys_prune_the_encoder_as_transformers_t5_prune_heads_does():
    model = tiny_t5()
    pruned = prune_heads(model, {1: [0]})
    assert pruned.encoder_layer_heads == [[0, 1, 2], [1, 2]]
    assert pruned.decoder_layer_heads is None and pruned.cross_attention_heads_per_layer is None
    assert_outputs_equal(pruned, model, {"encoder": {1: [0]}})


@pytest.mark.slow(reason="token-by-token decoding of a pruned T5")
def test_incremental_decoding_of_a_pruned_t5_equals_its_decode():
    pruned = prune_heads(tiny_t5(), TO_PRUNE)
    inputs = batch()
    encoder_mask = inputs["encoder_padding_mask"]
    decoder_ids = inputs["decoder_token_ids"]
    encoded = pruned.encode(inputs["encoder_token_ids"], encoder_mask)
    expected = to_numpy(pruned.decode(decoder_ids, np.ones_like(decoder_ids), encoded, encoder_mask))
    caches = pruned.self_attention_caches(2, decoder_ids.shape[1])
    assert [cache.shape[1] for cache in caches] == [2, 3, 1]
    cross = pruned.cross_attention_caches(encoded)
    for index in range(decoder_ids.shape[1]):
        logits, caches = pruned.decode_step(decoder_ids[:, index:index + 1], index, caches, cross,
                                            encoder_mask)
        np.testing.assert_allclose(to_numpy(logits), expected[:, index], atol=TOLERANCE, rtol=0)


def test_a_seq2seq_task_is_rebuilt_around_its_pruned_t5():
    task = kbert.tasks.Seq2SeqLM(tiny_t5(tie_embeddings=False, use_gated_activation=True,
                                         activation="gelu_approximate"))
    pruned = prune_heads(task, TO_PRUNE)
    assert isinstance(pruned, kbert.tasks.Seq2SeqLM)
    assert pruned.backbone.cross_attention_heads_per_layer == [3, 1, 2]
    expected = task.backbone.with_internals(False, False)({**batch(), **head_masks(TO_PRUNE)})
    np.testing.assert_allclose(to_numpy(pruned(batch())), to_numpy(expected["logits"]),
                               atol=TOLERANCE, rtol=0)


def test_bad_heads_are_refused():
    model = tiny_t5()
    for heads, message in (
        ({"encoders": {0: [0]}}, r"stacks \['encoder', 'decoder', 'cross_attention'\].*'encoders'"),
        ({"decoder": [0]}, r"\{stack: \{layer: \[heads\]\}\}.*received \{'decoder': \[0\]\}"),
        ({"decoder": {3: [0]}}, r"no layer 3 in the T5's decoder; it has layers 0..2"),
        ({"encoder": {0: [3]}}, r"layer 0 of the T5's encoder has heads 0..2; received \[3\]"),
        ({"cross_attention": {2: [0, 1, 2]}}, "every head of layer 2 of the T5's cross_attention"),
    ):
        with pytest.raises(ValueError, match=message):
            prune_heads(model, heads)
    with pytest.raises(ValueError, match="takes a kbert Encoder or T5.*received a Dense"):
        prune_heads(keras.layers.Dense(2), {0: [0]})
    with pytest.raises(ValueError, match="encoder_layer_heads must list"):
        tiny_t5(encoder_layer_heads=[[0, 2], [2]])  # column 1 unused
    with pytest.raises(ValueError, match="cross_attention_heads_per_layer must list"):
        tiny_t5(cross_attention_heads_per_layer=[1, 4, 1])

"""prune_heads: transformers 4's `prune_heads` on an imported BERT and ALBERT, the head-masked
model's outputs on dense, BigBird and Longformer encoders and on a task, and a .keras round trip."""

import keras
import numpy as np
import pytest
from bert_heads import (
    HEADS,
    HIDDEN,
    LAYERS,
    TOLERANCE,
    batch,
    imported_albert,
    imported_bert,
    prune_albert_like_transformers,
    prune_like_transformers,
    torch,
    torch_inputs,
)
from helpers import to_numpy

import kbert
from kbert.analysis import prune_heads

# Layer 2 keeps one head; layer 1 loses a middle one.
TO_PRUNE = {0: [1], 1: [0, 2, 3], 2: [2]}


def head_mask_of(heads_to_prune, layers=LAYERS, heads=HEADS):
    head_mask = np.ones((layers, heads), "float32")
    for layer, pruned in heads_to_prune.items():
        head_mask[layer, pruned] = 0.0
    return head_mask


def test_equals_transformers_prune_heads_and_the_head_masked_model(tmp_path):
    reference, encoder = imported_bert(tmp_path / "bert")
    inputs = batch()
    pruned = prune_heads(encoder, TO_PRUNE)
    assert pruned.heads_per_layer == [3, 1, 3]
    head_width = HIDDEN // HEADS
    removed = sum(len(heads) for heads in TO_PRUNE.values())
    assert encoder.count_params() - pruned.count_params() == removed * (4 * HIDDEN * head_width + 3 * head_width)
    with torch.no_grad():
        expected = prune_like_transformers(reference, TO_PRUNE)(**torch_inputs(inputs))
    assert sum(p.numel() for p in reference.parameters()) == pruned.count_params()
    outputs = pruned(inputs)
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               expected.last_hidden_state.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(to_numpy(outputs["pooled_output"]),
                               expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)
    masked = encoder({**inputs, "head_mask": head_mask_of(TO_PRUNE)})
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               to_numpy(masked["sequence_output"]), atol=1e-5, rtol=0)
    # The original is untouched; the copy saves and loads with its head counts.
    assert encoder.heads_per_layer is None and encoder.count_params() > pruned.count_params()
    pruned.save(tmp_path / "pruned.keras")
    restored = keras.saving.load_model(tmp_path / "pruned.keras")
    assert restored.heads_per_layer == [3, 1, 3]
    np.testing.assert_array_equal(to_numpy(restored(inputs)["sequence_output"]),
                                  to_numpy(outputs["sequence_output"]))


def test_albert_prunes_its_shared_layer_as_transformers_does(tmp_path):
    """transformers' AlbertModel numbers the shared layers: {0: heads} prunes the one shared
    block, so every layer loses those heads, and the parameters shrink once."""
    reference, encoder = imported_albert(tmp_path / "albert")
    to_prune = {0: [1, 3]}
    pruned = prune_heads(encoder, to_prune)
    assert pruned.share_layers and pruned.heads_per_layer == [2] * LAYERS
    head_width = HIDDEN // HEADS
    assert encoder.count_params() - pruned.count_params() == 2 * (4 * HIDDEN * head_width + 3 * head_width)
    with torch.no_grad():
        expected = prune_albert_like_transformers(reference, to_prune)(**torch_inputs(batch()))
    assert sum(p.numel() for p in reference.parameters()) == pruned.count_params()
    outputs = pruned(batch())
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               expected.last_hidden_state.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(to_numpy(outputs["pooled_output"]),
                               expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)
    masked = encoder({**batch(), "head_mask": head_mask_of({layer: [1, 3] for layer in range(LAYERS)})})
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               to_numpy(masked["sequence_output"]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"no layer 1 in the encoder; it has layers 0..0 \(its 3 "
                                         "layers share one block"):
        prune_heads(encoder, {1: [0]})


def test_a_pruned_encoder_takes_a_head_mask_per_layer_and_prunes_again(tmp_path):
    _, encoder = imported_bert(tmp_path)
    pruned = prune_heads(encoder, TO_PRUNE)
    ragged = [np.array([1, 0, 1], "float32"), np.ones(1, "float32"), np.ones(3, "float32")]
    twice = prune_heads(pruned, {0: [1]})  # the layer's head 1 now is head 2 of the original
    assert twice.heads_per_layer == [2, 1, 3]
    np.testing.assert_allclose(to_numpy(twice(batch())["sequence_output"]),
                               to_numpy(pruned({**batch(), "head_mask": ragged})["sequence_output"]),
                               atol=1e-5, rtol=0)


def sparse_inputs(length, with_global=False):
    rng = np.random.default_rng(3)
    token_ids = rng.integers(1, 50, (2, length)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, length - 5:] = 0
    inputs = {"token_ids": token_ids * padding_mask, "segment_ids": np.zeros_like(token_ids),
              "padding_mask": padding_mask}
    if with_global:
        inputs["global_attention_mask"] = np.eye(2, length, dtype="int32")
    return inputs


SPARSE = {
    # 24 tokens in blocks of 2: past the full-attention length (14), so random blocks count.
    "bigbird": ({"block_size": 2, "num_random_blocks": 1}, 24, False),
    "longformer": ({"window": 2, "dilation": [1, 2, 1, 2], "max_global_tokens": 2}, 13, True),
}


@pytest.mark.parametrize("attention", sorted(SPARSE))
@pytest.mark.slow(reason="sparse attention at several head counts: JAX compiles each eager operation per shape")
def test_sparse_encoders_equal_their_head_masked_model(attention):
    kwargs, length, with_global = SPARSE[attention]
    encoder = kbert.models.Encoder(
        vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
        max_positions=32, attention=attention, attention_kwargs=kwargs, dropout=0.0,
        initializer_range=0.3,
    )
    inputs = sparse_inputs(length, with_global)
    to_prune = {0: [1], 1: [0, 2, 3]}
    pruned = prune_heads(encoder, to_prune)
    per_head = 7 if attention == "longformer" else 4  # Longformer's global q, k, v too
    bias = 6 if attention == "longformer" else 3
    assert encoder.count_params() - pruned.count_params() == 4 * (per_head * 16 * 4 + bias * 4)
    masked = encoder({**inputs, "head_mask": head_mask_of(to_prune, 2, 4)})["sequence_output"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(to_numpy(pruned(inputs)["sequence_output"])[real],
                               to_numpy(masked)[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", sorted(SPARSE))
def test_sparse_albert_equals_its_model_masked_in_every_layer(attention):
    kwargs, length, with_global = SPARSE[attention]
    encoder = kbert.models.Encoder(
        vocabulary_size=50, num_layers=3, num_heads=4, hidden_dim=16, intermediate_dim=32,
        max_positions=32, embedding_dim=8, share_layers=True, attention=attention,
        attention_kwargs=kwargs, dropout=0.0, initializer_range=0.3,
    )
    inputs = sparse_inputs(length, with_global)
    pruned = prune_heads(encoder, {0: [0, 2]})
    per_head, bias = (7, 6) if attention == "longformer" else (4, 3)
    assert encoder.count_params() - pruned.count_params() == 2 * (per_head * 16 * 4 + bias * 4)
    masked = encoder({**inputs, "head_mask": head_mask_of({0: [0, 2], 1: [0, 2], 2: [0, 2]}, 3, 4)})
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(to_numpy(pruned(inputs)["sequence_output"])[real],
                               to_numpy(masked["sequence_output"])[real], atol=1e-5, rtol=0)


def test_a_task_is_rebuilt_around_its_pruned_encoder():
    backbone = kbert.models.Encoder(vocabulary_size=99, num_layers=LAYERS, num_heads=HEADS,
                                    hidden_dim=16, intermediate_dim=32, max_positions=16,
                                    initializer_range=0.3)
    classifier = kbert.tasks.TextClassifier(backbone, num_classes=3, hidden_activation="tanh")
    pruned = prune_heads(classifier, TO_PRUNE)
    assert isinstance(pruned, kbert.tasks.TextClassifier) and pruned.backbone.heads_per_layer == [3, 1, 3]
    expected = classifier({**batch(), "head_mask": head_mask_of(TO_PRUNE)})
    np.testing.assert_allclose(to_numpy(pruned(batch())), to_numpy(expected), atol=1e-5, rtol=0)


def test_bad_arguments_are_refused():
    encoder = kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=2, hidden_dim=8,
                                   intermediate_dim=8, max_positions=8)
    for heads, message in (({2: [0]}, "no layer 2"), ({0: [2]}, r"heads 0..1; received \[2\]"),
                           ({1: [0, 1]}, "every head of layer 1")):
        with pytest.raises(ValueError, match=message):
            prune_heads(encoder, heads)
    with pytest.raises(ValueError, match="no layer '0'"):
        prune_heads(encoder, {"0": [0]})
    with pytest.raises(ValueError, match="heads_per_layer must list"):
        kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=2, hidden_dim=8,
                             intermediate_dim=8, max_positions=8, heads_per_layer=[1, 3])


def test_least_important_heads_keep_one_head_per_layer():
    scores = np.array([[0.1, 0.9, 0.2], [0.05, 0.99, 0.3]])
    assert kbert.analysis.least_important_heads(scores, 2) == {0: [0], 1: [0]}
    assert kbert.analysis.least_important_heads(scores, 4) == {0: [0, 2], 1: [0, 2]}
    with pytest.raises(ValueError, match="Cannot prune 5 heads"):
        kbert.analysis.least_important_heads(scores, 5)


@pytest.mark.backend_independent  # the procedure; pruned attention's numbers on every backend: the tests above
@pytest.mark.slow(reason="trains a classifier, then scores and prunes its heads")
def test_pruning_the_least_important_heads_of_a_trained_classifier():
    """Michel et al.'s recipe end to end: train, score the heads, prune the lowest half."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 12, (128, 8)).astype("int32")
    labels = (tokens == 7).any(axis=1).astype("int32")  # needs attention across the sequence
    x = {"token_ids": tokens, "padding_mask": np.ones_like(tokens)}
    backbone = kbert.models.Encoder(vocabulary_size=12, num_layers=2, num_heads=4, hidden_dim=16,
                                    intermediate_dim=32, max_positions=8, dropout=0.0)
    classifier = kbert.tasks.TextClassifier(backbone, num_classes=2, dropout=0.0)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-2))
    classifier.fit(x, {"labels": labels}, batch_size=32, epochs=8, verbose=0)
    accuracy = np.mean(classifier.predict(x, verbose=0).argmax(-1) == labels)
    assert accuracy == 1.0  # learned (measured: loss below 0.01)

    batches = [({k: v[i:i + 64] for k, v in x.items()}, {"labels": labels[i:i + 64]})
               for i in (0, 64)]
    scores = kbert.analysis.head_importance(classifier, batches)
    np.testing.assert_allclose(np.linalg.norm(scores, axis=1), 1.0, atol=1e-6)
    to_prune = kbert.analysis.least_important_heads(scores, 4)
    pruned = prune_heads(classifier, to_prune)
    assert sum(pruned.backbone.heads_per_layer) == 4
    logits = pruned.predict(x, verbose=0)
    masked = classifier({**x, "head_mask": head_mask_of(to_prune, 2, 4)})
    np.testing.assert_allclose(logits, to_numpy(masked), atol=1e-4, rtol=0)
    # Half the heads gone, the task is still solved (measured: 1.0 on TensorFlow and
    # PyTorch, 0.984 on JAX).
    assert np.mean(logits.argmax(-1) == labels) >= 0.95

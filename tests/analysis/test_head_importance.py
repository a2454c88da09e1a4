"""head_importance: |∂L/∂ξ_h| equal to torch autograd through transformers' BERT, and to
finite differences of a task's own loss."""

import keras
import numpy as np
import pytest
from bert_heads import HEADS, LAYERS, batch, head_masked, imported_bert, torch, torch_inputs

import kbert
from kbert.analysis import head_importance

PROJECTION = np.random.default_rng(5).normal(size=(32, 3)).astype("float32")


def second_batch():
    inputs = batch()
    inputs["token_ids"] = (inputs["token_ids"] * 7 + 3) % 99 * inputs["padding_mask"]
    return inputs


def projected_loss(sequence, padding_mask):
    """The mean over real tokens of the squared projected hidden states (a smooth test loss)."""
    squares = keras.ops.sum(keras.ops.square(keras.ops.matmul(sequence, PROJECTION)), axis=-1)
    weights = keras.ops.cast(padding_mask, squares.dtype)
    return keras.ops.sum(squares * weights) / keras.ops.sum(weights)


def test_equals_torch_autograd_through_transformers(tmp_path):
    reference, encoder = imported_bert(tmp_path)
    batches = [batch(), second_batch()]
    expected = np.zeros((LAYERS, HEADS))
    for inputs in batches:  # transformers 4's head mask, differentiated by torch
        head_mask = torch.ones(LAYERS, HEADS, requires_grad=True)
        with head_masked(reference, head_mask):
            sequence = reference(**torch_inputs(inputs)).last_hidden_state
        mask = torch.tensor(inputs["padding_mask"], dtype=torch.float32)
        squares = (sequence @ torch.tensor(PROJECTION)).square().sum(-1)
        ((squares * mask).sum() / mask.sum()).backward()
        expected += head_mask.grad.abs().numpy() / len(batches)

    def loss_fn(x, y, y_pred, sample_weight):
        return projected_loss(y_pred["sequence_output"], x["padding_mask"])

    raw = head_importance(encoder, batches, loss_fn, normalize=False)
    # float32 gradients on both sides: round-off only (measured below 1e-5 relative).
    np.testing.assert_allclose(raw, expected, rtol=1e-4, atol=1e-6)
    normalized = head_importance(encoder, batches, loss_fn)
    np.testing.assert_allclose(normalized, expected / np.linalg.norm(expected, axis=1, keepdims=True),
                               rtol=1e-4, atol=1e-6)


def classification_data():
    rng = np.random.default_rng(1)
    x = {"token_ids": rng.integers(1, 50, (4, 8)).astype("int32"),
         "padding_mask": np.ones((4, 8), "int32")}
    return x, {"labels": np.array([0, 1, 2, 1])}


def test_a_tasks_own_loss_equals_finite_differences():
    backbone = kbert.models.Encoder(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
                                    intermediate_dim=32, max_positions=16, initializer_range=0.5)
    classifier = kbert.tasks.TextClassifier(backbone, num_classes=3)
    x, y = classification_data()
    raw = head_importance(classifier, [(x, y)], normalize=False)

    def loss_at(head_mask):
        y_pred = classifier({**x, "head_mask": head_mask}, training=False)
        return float(keras.ops.convert_to_numpy(classifier.compute_loss(x, y, y_pred)))

    step = 1e-2  # central differences: error O(step²) far below the tolerance
    finite = np.zeros((2, 2))
    for layer in range(2):
        for head in range(2):
            shift = np.zeros((2, 2), "float32")
            shift[layer, head] = step
            finite[layer, head] = (loss_at(1 + shift) - loss_at(1 - shift)) / (2 * step)
    np.testing.assert_allclose(raw, np.abs(finite), rtol=1e-2, atol=1e-4)
    assert raw.min() > 0


def test_bad_arguments_are_refused():
    encoder = kbert.models.Encoder(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                                   intermediate_dim=8, max_positions=16)
    x, _ = classification_data()
    with pytest.raises(ValueError, match="no loss of its own"):
        head_importance(encoder, [x])
    with pytest.raises(ValueError, match="an Encoder `backbone`"):
        head_importance(keras.Sequential([keras.layers.Dense(1)]), [x], lambda *args: 0.0)
    with pytest.raises(ValueError, match="batches` is empty"):
        head_importance(encoder, [], lambda *args: 0.0)

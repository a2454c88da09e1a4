"""What the task-model tests share: tiny encoders of every family, inputs, a NumPy
cross-entropy, and a short compiled fine-tune."""

import keras
import numpy as np
from helpers import BACKEND, assert_close, to_numpy

import kbert

VOCABULARY, LENGTH = 40, 16

# family -> the preset it is shrunk from; every kbert encoder family.
FAMILIES = {
    "bert": "bert_tiny",
    "roberta": "roberta_base",
    "albert": "albert_base",
    "electra": "electra_small",
    "distilbert": "distilbert_base",
    "bigbird": "bigbird_base",
    "longformer": "longformer_base",
}
_SMALL = dict(
    vocabulary_size=VOCABULARY,
    num_layers=1,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=LENGTH + 4,
    dropout=0.0,
)
# BigBird: blocks of 2 with 1 random block, so 16 tokens take the sparse path
# (full attention stops at (5 + 2·1)·2 = 14 tokens).
_FAMILY_SIZES = {
    "albert": {"embedding_dim": 8},
    "electra": {"embedding_dim": 8},
    "bigbird": {"attention_kwargs": {"block_size": 2, "num_random_blocks": 1}},
    "longformer": {"attention_kwargs": {"window": 4}},
}

# `fit` is XLA-compiled on TensorFlow and JAX (PyTorch has no XLA here); the
# compiled forward pass is checked by the task harness (tests/task_harness.py).
JIT_COMPILE = BACKEND != "torch"


def tiny_encoder(family="bert", **overrides):
    """A one-layer, 16-wide encoder of `family`, built from its preset."""
    sizes = {**_SMALL, **_FAMILY_SIZES.get(family, {}), **overrides}
    return kbert.models.build(FAMILIES[family], **sizes)


def random_inputs(seed, batch, choices=None, length=LENGTH, num_segments=2):
    """Token ids in [3, VOCABULARY) after a [CLS]=1, right padding, and `segment_ids`:
    the second half 1 for two segments, zeros for one, none for none.

    With `choices`, every input is `(batch, choices, length)`.
    """
    rng = np.random.default_rng(seed)
    shape = (batch, length) if choices is None else (batch, choices, length)
    lengths = rng.integers(length // 2, length + 1, size=shape[:-1])
    padding_mask = (np.arange(length) < lengths[..., None]).astype("int32")
    token_ids = rng.integers(3, VOCABULARY, size=shape).astype("int32")
    token_ids[..., 0] = 1
    token_ids *= padding_mask
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    if num_segments:
        second = (np.arange(length) >= length // 2) * (num_segments > 1)
        inputs["segment_ids"] = second.astype("int32") * padding_mask
    return inputs


def np_cross_entropy(labels, logits):
    """Softmax cross-entropy of integer `labels` under `logits` (last axis), in float64."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probabilities, np.asarray(labels)[..., None], axis=-1)[..., 0]


def np_weighted_mean(values, weights):
    """The task losses' mean over kept entries: `Σ w·values / (Σ w + 1e-5)`."""
    weights = np.asarray(weights, np.float64)
    return (weights * values).sum() / (weights.sum() + 1e-5)


def keras_round_trip(model, x, tmp_path):
    """`model` saved to a `.keras` file and loaded back; checks identical outputs on `x`."""
    expected = to_numpy(model(x))
    model.save(tmp_path / "task.keras")
    restored = keras.saving.load_model(tmp_path / "task.keras")
    assert type(restored) is type(model)
    assert len(restored.weights) == len(model.weights)
    assert_close(restored(x), expected, atol=0)
    return restored


def fine_tune(model, x, y, epochs, learning_rate=1e-2, batch_size=16):
    """Fit with Adam, compiled with XLA where the backend has it; the history."""
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), jit_compile=JIT_COMPILE)
    return model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0).history

"""XLNetPretrainer: the loss against NumPy, the tied head on the query stream, a short
permutation-LM run on pretraining_dataset(objective="plm") that learns, save/load."""

import keras
import numpy as np
import pytest
from test_pretraining_dataset import batches, make_dataset

import kbert
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer

TINY = dict(vocabulary_size=2000, num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64,
            dropout=0.0)


def plm_batch():
    x, y = batches(make_dataset("plm", sequence_length=32), limit=1)[0]
    return x, y


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_logits_are_the_tied_head_on_the_query_stream_and_the_loss_is_numpy():
    model = XLNetPretrainer(kbert.models.xlnet_tiny(**TINY))
    x, y = plm_batch()
    logits = to_numpy(model(x)["plm_logits"])
    query = to_numpy(model.backbone(x)["query_output"])
    table = to_numpy(model.backbone.token_embedding.embeddings)
    np.testing.assert_allclose(logits, query @ table.T + to_numpy(model.lm_head.bias), atol=1e-4)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, y["mask_ids"][..., None], -1)[..., 0]
    expected = (nll * y["mask_weights"]).sum() / (y["mask_weights"].sum() + 1e-5)
    loss = float(to_numpy(model.compute_loss(x, y, model(x))))
    np.testing.assert_allclose(loss, expected, rtol=1e-4)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_short_permutation_lm_run_lowers_the_loss():
    model = XLNetPretrainer(kbert.models.xlnet_tiny(**TINY))
    x, y = plm_batch()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, y, batch_size=8, epochs=30, verbose=0).history
    assert {"loss", "plm_loss", "plm_accuracy"} <= set(history)
    losses = history["loss"]
    print(f"plm: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]


def test_keras_file_round_trip(tmp_path):
    model = XLNetPretrainer(kbert.models.xlnet_tiny(**TINY))
    x, _ = plm_batch()
    path = tmp_path / "plm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, XLNetPretrainer)
    np.testing.assert_allclose(to_numpy(loaded(x)["plm_logits"]), to_numpy(model(x)["plm_logits"]),
                               atol=1e-6)

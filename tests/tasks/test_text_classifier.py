"""TextClassifier: the task harness; every encoder, both heads against NumPy, the losses, learning."""

import numpy as np
import pytest
from helpers import assert_close, dense_weights, np_dense, np_gelu, to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check
from task_testing import (
    FAMILIES,
    fine_tune,
    np_cross_entropy,
    np_weighted_mean,
    random_inputs,
    tiny_encoder,
)

from kbert.tasks import TextClassifier

BATCH = 4


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_and_loss_on_every_encoder(family):
    backbone = tiny_encoder(family)
    model = TextClassifier(backbone, num_classes=3)
    x = random_inputs(0, BATCH, num_segments=backbone.num_segments)
    logits = model(x)
    assert tuple(logits.shape) == (BATCH, 3)
    loss = model.compute_loss(x, {"labels": np.array([0, 1, 2, 1])}, logits)
    assert np.isfinite(to_numpy(loss))


@pytest.mark.parametrize("hidden_activation", [None, "gelu"])
def test_head_matches_numpy(hidden_activation):
    model = TextClassifier(tiny_encoder("electra"), 3, hidden_activation=hidden_activation)
    x = random_inputs(1, BATCH)
    outputs = to_numpy(model.backbone(x))
    if hidden_activation is None:  # pooled output -> Dense
        features = outputs["pooled_output"]
    else:  # [CLS] -> Dense(H) -> GELU -> Dense (ELECTRA's head)
        hidden = np_dense(outputs["sequence_output"][:, 0], *dense_weights(model.hidden_dense))
        features = np_gelu(hidden)
    expected = np_dense(features, *dense_weights(model.output_dense))
    assert_close(model(x), expected, atol=1e-5)


def test_classification_loss_and_accuracy_match_numpy():
    model = TextClassifier(tiny_encoder(), num_classes=3)
    # The last row only pads the batch (label -1): it counts nowhere.
    x, y = random_inputs(2, BATCH), {"labels": np.array([2, 0, 1, -1], "int32")}
    logits = to_numpy(model(x))
    loss = float(to_numpy(model.compute_loss(x, y, logits)))
    kept = y["labels"] >= 0
    expected = np_weighted_mean(np_cross_entropy(np.maximum(y["labels"], 0), logits), kept)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    hits = logits.argmax(-1) == y["labels"]
    assert float(model.label_metric.result()) == pytest.approx(hits[kept].mean())
    assert model.label_metric.name == "accuracy"


def test_regression_is_mean_squared_error():
    model = TextClassifier(tiny_encoder(), num_classes=1)
    # The last row only pads the batch (label NaN): it counts nowhere.
    x, y = random_inputs(3, BATCH), {"labels": np.array([0.5, 4.0, 2.5, np.nan], "float32")}
    predictions = model(x)
    assert tuple(predictions.shape) == (BATCH, 1)
    loss = float(to_numpy(model.compute_loss(x, y, predictions)))
    errors = (to_numpy(predictions)[:3, 0] - y["labels"][:3]) ** 2
    np.testing.assert_allclose(loss, np_weighted_mean(errors, np.ones(3)), rtol=1e-6)
    assert model.label_metric.name == "mean_squared_error"
    np.testing.assert_allclose(float(model.label_metric.result()), errors.mean(), rtol=1e-6)


def test_longformer_makes_the_first_token_global():
    # Wide initial weights, so that the global token visibly changes the logits.
    model = TextClassifier(tiny_encoder("longformer", initializer_range=0.5), num_classes=2)
    x = random_inputs(4, BATCH, num_segments=1)
    first = np.zeros_like(x["token_ids"])
    first[:, 0] = 1
    assert_close(model(x), model({**x, "global_attention_mask": first}), atol=0)
    no_global = model({**x, "global_attention_mask": np.zeros_like(first)})
    assert np.abs(to_numpy(model(x)) - to_numpy(no_global)).max() > 1e-2


CASE = TaskCase(
    lambda: TextClassifier(tiny_encoder("roberta"), 5, dropout=0.2, hidden_activation="tanh"),
    lambda batch, length: random_inputs(length, batch, length=length, num_segments=1),
    make_targets=lambda x: {"labels": np.arange(len(x["token_ids"])) % 5},
    unmoved_variables=("pooler",),  # a head with a hidden layer reads [CLS] of the sequence output
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def _token_7_data(seed, batch):
    """Random sequences of ids 8..39; label 1 when token 7 was put at a random position."""
    x = random_inputs(seed, batch)
    x["token_ids"] = np.where(x["token_ids"] > 2, x["token_ids"] % 32 + 8, x["token_ids"])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, batch).astype("int32")
    for i in np.flatnonzero(labels):
        x["token_ids"][i, rng.integers(1, x["padding_mask"][i].sum())] = 7
    return x, {"labels": labels}


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fine_tune_learns_whether_token_7_occurs():
    model = TextClassifier(tiny_encoder(), num_classes=2, dropout=0.0)
    history = fine_tune(model, *_token_7_data(seed=10, batch=128), epochs=8)
    x, y = _token_7_data(seed=11, batch=64)
    accuracy = (to_numpy(model(x)).argmax(-1) == y["labels"]).mean()
    print(f"token-7 classifier: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
          f"held-out accuracy {accuracy:.2f}")
    assert accuracy >= 0.9  # chance: 0.5


def test_fine_tune_regresses_how_often_token_7_occurs():
    x, _ = _token_7_data(seed=12, batch=192)
    counts = np.random.default_rng(12).integers(0, 4, len(x["token_ids"]))
    for row, count in enumerate(counts):  # `count` sevens at distinct positions after [CLS]
        places = np.random.default_rng(row).permutation(np.arange(1, x["padding_mask"][row].sum()))
        x["token_ids"][row] = np.where(x["token_ids"][row] == 7, 8, x["token_ids"][row])
        x["token_ids"][row, places[:count]] = 7
    y = {"labels": counts.astype("float32")}
    model = TextClassifier(tiny_encoder(), num_classes=1, dropout=0.0)
    train, held_out = slice(0, 128), slice(128, None)
    fine_tune(model, {k: v[train] for k, v in x.items()}, {"labels": y["labels"][train]}, epochs=10)
    predicted = to_numpy(model({k: v[held_out] for k, v in x.items()}))[:, 0]
    error = np.mean((predicted - y["labels"][held_out]) ** 2)
    print(f"token-7 count regression: held-out MSE {error:.3f}, variance {np.var(y['labels'][held_out]):.3f}")
    assert error < 0.25 * np.var(y["labels"][held_out])  # a constant guess scores the variance (1.34)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        TextClassifier(tiny_encoder(), num_classes=0)
    model = TextClassifier(tiny_encoder(), num_classes=3)
    x = random_inputs(7, BATCH)
    with pytest.raises(ValueError, match=r"TextClassifier inputs lack \['padding_mask'\]"):
        model({"token_ids": x["token_ids"]})
    logits = model(x)
    with pytest.raises(ValueError, match="TextClassifier label 3 is outside the valid range"):
        model.compute_loss(x, {"labels": np.array([0, 1, 3, 2])}, logits)
    with pytest.raises(ValueError, match=r"TextClassifier targets lack \['labels'\]"):
        model.compute_loss(x, {"label": np.zeros(BATCH, "int32")}, logits)
    with pytest.raises(ValueError, match="TextClassifier takes no sample_weight"):
        model.compute_loss(x, {"labels": np.zeros(BATCH, "int32")}, logits, np.ones(BATCH))

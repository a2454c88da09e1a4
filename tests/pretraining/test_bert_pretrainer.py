"""BertPretrainer: the task harness; heads, MLM + NSP/SOP losses against NumPy, training, ALBERT's
shared table through saving, bad input."""

import json

import keras
import numpy as np
import pytest
from helpers import np_softmax, to_numpy
from task_harness import TASK_CHECKS, paired_case, run_task_check

import kbert
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.training.optimizers import create_optimizer
from kbert.training.losses import weighted_cross_entropy

TINY = dict(
    vocabulary_size=60,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=32,
    dropout=0.0,
)
BATCH, LENGTH, PREDICTIONS, MASK_ID = 4, 16, 4, 3


def make_batch(seed=0, batch=BATCH, length=LENGTH):
    """Synthetic batch in the pipeline's format; the last prediction slot is padding."""
    rng = np.random.default_rng(seed)
    lengths = length - rng.integers(0, 6, batch)
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    original = rng.integers(5, TINY["vocabulary_size"], (batch, length)).astype("int32")
    original[:, 0] = 1  # [CLS]
    original *= padding_mask
    positions = np.zeros((batch, PREDICTIONS), "int32")
    weights = np.zeros((batch, PREDICTIONS), "float32")
    for i in range(batch):
        positions[i, :-1] = rng.choice(np.arange(1, lengths[i]), PREDICTIONS - 1, replace=False)
        weights[i, :-1] = 1.0
    mask_ids = np.take_along_axis(original, positions, axis=1)
    mask_ids[:, -1] = 7  # a padding slot's label must not count
    token_ids = original.copy()
    np.put_along_axis(token_ids, positions[:, :-1], MASK_ID, axis=1)
    segment_ids = ((np.arange(length)[None, :] >= length // 2) * padding_mask).astype("int32")
    x = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "mask_positions": positions,
    }
    y = {
        "mask_ids": mask_ids,
        "mask_weights": weights,
        "pair_labels": rng.integers(0, 2, batch).astype("int32"),
    }
    return x, y


def np_cross_entropy(labels, logits):
    logits = logits.astype(np.float64)
    log_probs = np.log(np_softmax(logits))
    return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("pair_objective", ["nsp", "sop", None])
def test_outputs_and_tied_head(pair_objective):
    model = BertPretrainer(kbert.models.Encoder(**TINY), pair_objective=pair_objective)
    x, _ = make_batch()
    outputs = model(x)
    expected_keys = {"mlm_logits"} | ({"pair_logits"} if pair_objective else set())
    assert set(outputs) == expected_keys
    assert tuple(outputs["mlm_logits"].shape) == (BATCH, PREDICTIONS, TINY["vocabulary_size"])
    if pair_objective:
        assert tuple(outputs["pair_logits"].shape) == (BATCH, 2)
    assert model.mlm_head.token_embedding is model.backbone.token_embedding
    assert model.mlm_head.decoder is None


def test_loss_matches_numpy():
    model = BertPretrainer(kbert.models.Encoder(**TINY), pair_objective="nsp")
    x, y = make_batch()
    y_pred = model(x)
    loss = float(to_numpy(model.compute_loss(x, y, y_pred)))
    mlm_logits, pair_logits = to_numpy(y_pred["mlm_logits"]), to_numpy(y_pred["pair_logits"])
    w = y["mask_weights"]
    mlm = (w * np_cross_entropy(y["mask_ids"], mlm_logits)).sum() / (w.sum() + 1e-5)
    pair = np_cross_entropy(y["pair_labels"], pair_logits).mean()
    np.testing.assert_allclose(loss, mlm + pair, rtol=1e-5)
    np.testing.assert_allclose(float(model.mlm_loss_tracker.result()), mlm, rtol=1e-5)
    np.testing.assert_allclose(float(model.pair_loss_tracker.result()), pair, rtol=1e-5)
    hits = (mlm_logits.argmax(-1) == y["mask_ids"]) * w
    np.testing.assert_allclose(float(model.mlm_accuracy.result()), hits.sum() / w.sum(), rtol=1e-6)


def test_zero_weight_slots_do_not_count():
    labels = np.array([[1, 2], [0, 4]], "int32")
    logits = np.random.default_rng(0).normal(size=(2, 2, 5)).astype("float32")
    weights = np.array([[1.0, 0.0], [1.0, 0.0]], "float32")
    changed = logits.copy()
    changed[:, 1] = 100.0 * np.arange(5)  # garbage in the padding slots
    first = float(weighted_cross_entropy(labels, logits, weights))
    second = float(weighted_cross_entropy(labels, changed, weights))
    expected = np_cross_entropy(labels[:, 0], logits[:, 0]).sum() / (2 + 1e-5)
    np.testing.assert_allclose([first, second], [expected, expected], rtol=1e-5)
    assert float(weighted_cross_entropy(labels, logits, np.zeros_like(weights))) == 0.0


@pytest.mark.parametrize(
    "pair_objective, variant",
    [("nsp", {}), ("sop", {"embedding_dim": 8, "share_layers": True})],
    ids=["bert_nsp", "albert_sop"],
)
@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
@pytest.mark.slow(reason="enough steps for the loss to fall")
def test_short_training_run_lowers_the_loss(pair_objective, variant):
    model = BertPretrainer(kbert.models.Encoder(**TINY, **variant), pair_objective=pair_objective)
    x, y = make_batch(batch=8)
    steps = 40
    model.compile(
        optimizer=create_optimizer("adamw", learning_rate=2e-2, total_steps=steps, warmup_steps=4)
    )
    history = model.fit(x, y, batch_size=8, epochs=steps, verbose=0).history
    assert {"loss", "mlm_loss", "mlm_accuracy", "pair_loss", "pair_accuracy"} <= set(history)
    losses = history["loss"]
    print(f"{pair_objective}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.5 * losses[0]
    assert history["mlm_accuracy"][-1] > history["mlm_accuracy"][0]


CASE = paired_case(
    lambda: BertPretrainer(kbert.models.Encoder(**TINY, embedding_dim=8, share_layers=True), pair_objective="sop"),
    make_batch,
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_albert_head_stays_tied_through_config_and_saving(tmp_path):
    backbone = kbert.models.Encoder(**TINY, embedding_dim=8, share_layers=True)
    model = BertPretrainer(backbone, pair_objective="sop", name="albert_pretrainer")
    assert tuple(model.mlm_head.transform.kernel.shape) == (16, 8)  # ALBERT's head: H -> E
    clone = BertPretrainer.from_config(json.loads(json.dumps(model.get_config())))
    assert clone.mlm_head.token_embedding is clone.backbone.token_embedding
    path = tmp_path / "pretrainer.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.pair_objective == "sop" and restored.name == "albert_pretrainer"
    assert restored.mlm_head.token_embedding is restored.backbone.token_embedding


def test_unknown_pair_objective_is_rejected():
    with pytest.raises(ValueError, match=r"Unknown pair_objective 'mlm'; expected one of \('nsp', 'sop', None\)"):
        BertPretrainer(kbert.models.Encoder(**TINY), pair_objective="mlm")


def test_mask_positions_of_wrong_rank_are_rejected():
    model = BertPretrainer(kbert.models.Encoder(**TINY))
    x, _ = make_batch()
    x["mask_positions"] = x["mask_positions"].reshape(-1)
    with pytest.raises(ValueError, match=r"mask_positions' must have shape \(batch, predictions\)"):
        model(x)


def test_missing_inputs_and_targets_are_named():
    model = BertPretrainer(kbert.models.Encoder(**TINY), pair_objective="nsp")
    x, y = make_batch()
    with pytest.raises(ValueError, match=r"BertPretrainer inputs lack \['mask_positions'\]"):
        model({key: value for key, value in x.items() if key != "mask_positions"})
    y_pred = model(x)
    with pytest.raises(ValueError, match=r"BertPretrainer targets lack \['pair_labels'\]"):
        del y["pair_labels"]
        model.compute_loss(x, y, y_pred)

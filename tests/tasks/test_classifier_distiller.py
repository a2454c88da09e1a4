"""ClassifierDistiller: the loss against NumPy (soft labels, mixed with hard ones), the harness, learning."""

import numpy as np
import pytest
from helpers import to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check
from task_testing import fine_tune, np_cross_entropy, np_weighted_mean, random_inputs, tiny_encoder

from kbert.tasks import ClassifierDistiller, TextClassifier

BATCH, CLASSES = 4, 3


def _np_log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def np_softened_kl(teacher_logits, student_logits, temperature):
    """`T² · KL(softmax(t/T) ‖ softmax(s/T))` per row (docs/algorithms.md §7)."""
    teacher = _np_log_softmax(np.asarray(teacher_logits) / temperature)
    student = _np_log_softmax(np.asarray(student_logits) / temperature)
    return temperature**2 * (np.exp(teacher) * (teacher - student)).sum(-1)


def _distiller(**options):
    return ClassifierDistiller(TextClassifier(tiny_encoder(), CLASSES, dropout=0.0), **options)


def _teacher_logits(seed):
    return (3 * np.random.default_rng(seed).standard_normal((BATCH, CLASSES))).astype("float32")


def test_soft_label_loss_and_agreement_match_numpy():
    distiller = _distiller(temperature=3.0)
    x, teacher = random_inputs(0, BATCH), _teacher_logits(0)
    logits = to_numpy(distiller(x))
    loss = float(to_numpy(distiller.compute_loss(x, {"teacher_logits": teacher}, logits)))
    np.testing.assert_allclose(loss, np_weighted_mean(np_softened_kl(teacher, logits, 3.0), np.ones(BATCH)),
                               rtol=1e-5)
    agreement = (logits.argmax(-1) == teacher.argmax(-1)).mean()
    assert float(distiller.distillation_accuracy.result()) == pytest.approx(agreement)


def test_hard_labels_mix_in_on_the_labelled_rows_only():
    distiller = _distiller(temperature=2.0, hard_label_weight=0.25)
    x, teacher = random_inputs(1, BATCH), _teacher_logits(1)
    labels = np.array([2, -1, 0, -1], "int32")  # -1: an unlabelled row (an augmented copy)
    logits = to_numpy(distiller(x))
    loss = float(to_numpy(distiller.compute_loss(x, {"teacher_logits": teacher, "labels": labels}, logits)))
    soft = np_weighted_mean(np_softened_kl(teacher, logits, 2.0), np.ones(BATCH))
    hard = np_weighted_mean(np_cross_entropy(np.maximum(labels, 0), logits), labels >= 0)
    np.testing.assert_allclose(loss, 0.75 * soft + 0.25 * hard, rtol=1e-5)
    assert float(distiller.label_loss_tracker.result()) == pytest.approx(hard, rel=1e-5)


CASE = TaskCase(
    lambda: _distiller(hard_label_weight=0.5),
    lambda batch, length: random_inputs(length, batch, length=length),
    make_targets=lambda x: {"teacher_logits": np.eye(CLASSES, dtype="float32")[np.arange(len(x["token_ids"])) % 3],
                            "labels": np.arange(len(x["token_ids"])) % CLASSES},
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
@pytest.mark.slow(reason="20 epochs of 128 rows: the soft-label loss plateaus a while before the student finds token 7")
def test_the_student_learns_the_teachers_answers_without_labels():
    """The teacher answers 1 when token 7 occurs (large logits), else 0; the student sees no label."""
    x = random_inputs(10, 128)
    x["token_ids"] = np.where(x["token_ids"] > 2, x["token_ids"] % 32 + 8, x["token_ids"])
    rng = np.random.default_rng(10)
    sevens = rng.integers(0, 2, 128).astype(bool)
    for i in np.flatnonzero(sevens):
        x["token_ids"][i, rng.integers(1, x["padding_mask"][i].sum())] = 7
    teacher = np.where(sevens[:, None], [[-4.0, 4.0, -4.0]], [[4.0, -4.0, -4.0]]).astype("float32")
    distiller = _distiller(temperature=1.0)  # at T = 2 the loss plateaus longer before it falls
    history = fine_tune(distiller, x, {"teacher_logits": teacher}, epochs=20)
    agreement = history["distillation_accuracy"][-1]
    print(f"distillation: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, agreement {agreement:.2f}")
    assert history["loss"][-1] < 0.5 * history["loss"][0] and agreement >= 0.9


@pytest.mark.backend_independent  # argument and target checks, before any backend computation
def test_bad_arguments_and_targets_are_named():
    with pytest.raises(ValueError, match="must be a TextClassifier with two classes or more.*num_classes 1"):
        ClassifierDistiller(TextClassifier(tiny_encoder(), 1))
    with pytest.raises(ValueError, match="temperature"):
        _distiller(temperature=0.0)
    with pytest.raises(ValueError, match="hard_label_weight"):
        _distiller(hard_label_weight=1.5)
    distiller = _distiller(hard_label_weight=0.5)
    x = random_inputs(2, BATCH)
    logits = distiller(x)
    with pytest.raises(ValueError, match=r"ClassifierDistiller targets lack \['labels'\]"):
        distiller.compute_loss(x, {"teacher_logits": _teacher_logits(2)}, logits)
    with pytest.raises(ValueError, match=r"teacher_logits' must have shape \(batch, num_classes=3\)"):
        distiller.fit(x, {"teacher_logits": np.zeros((BATCH, 2), "float32"), "labels": np.zeros(BATCH, "int32")},
                      verbose=0)

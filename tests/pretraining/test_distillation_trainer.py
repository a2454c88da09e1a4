"""DistillationTrainer and init_student_from_teacher: the task harness; losses against NumPy, training."""

import keras
import numpy as np
import pytest
from helpers import assert_close, np_softmax, to_numpy
from task_harness import TASK_CHECKS, paired_case, run_task_check

import kbert
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.pretraining.distillation_trainer import DistillationTrainer, init_student_from_teacher

VOCAB = 60
BASE = dict(
    vocabulary_size=VOCAB,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=32,
    dropout=0.0,
    use_pooler=False,
)
BATCH, LENGTH, PREDICTIONS, MASK_ID = 4, 16, 4, 3


def masked_lm(num_layers, seed=0, **overrides):
    model = BertPretrainer(
        kbert.models.Encoder(**{**BASE, "num_layers": num_layers, **overrides}), pair_objective=None
    )
    # Random output biases give logits of order 1, so the soft targets are far from uniform.
    vocabulary_size = model.backbone.vocabulary_size
    bias = np.random.default_rng(seed).normal(size=vocabulary_size).astype("float32")
    model.mlm_head.bias.assign(bias)
    return model


def make_batch(seed=0, batch=BATCH, length=LENGTH):
    rng = np.random.default_rng(seed)
    lengths = length - rng.integers(0, 6, batch)
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    original = (rng.integers(5, VOCAB, (batch, length)) * padding_mask).astype("int32")
    original[:, 0] = 1
    positions = np.zeros((batch, PREDICTIONS), "int32")
    weights = np.zeros((batch, PREDICTIONS), "float32")
    for i in range(batch):
        positions[i, :-1] = rng.choice(np.arange(1, lengths[i]), PREDICTIONS - 1, replace=False)
        weights[i, :-1] = 1.0
    mask_ids = np.take_along_axis(original, positions, axis=1)
    token_ids = original.copy()
    np.put_along_axis(token_ids, positions[:, :-1], MASK_ID, axis=1)
    x = {
        "token_ids": token_ids,
        "segment_ids": np.zeros_like(token_ids),
        "padding_mask": padding_mask,
        "mask_positions": positions,
    }
    return x, {"mask_ids": mask_ids, "mask_weights": weights}


def np_log_softmax(logits):
    return np.log(np_softmax(logits.astype(np.float64)))


def np_losses(outputs, x, y, temperature):
    """Independent DistilBERT terms: T²·KL, hard-label CE, 1 − cosine."""
    w = y["mask_weights"]
    student = np_log_softmax(outputs["mlm_logits"] / temperature)
    teacher = np_log_softmax(outputs["teacher_logits"] / temperature)
    kl = (np.exp(teacher) * (teacher - student)).sum(-1)
    ce_term = (w * kl).sum() / (w.sum() + 1e-5) * temperature**2
    log_probs = np_log_softmax(outputs["mlm_logits"])
    hard = -np.take_along_axis(log_probs, y["mask_ids"][..., None], -1)[..., 0]
    mlm_term = (w * hard).sum() / (w.sum() + 1e-5)
    h = outputs["hidden_states"].astype(np.float64)
    t = outputs["teacher_hidden_states"].astype(np.float64)
    cosine = (h * t).sum(-1) / (np.linalg.norm(h, axis=-1) * np.linalg.norm(t, axis=-1))
    mask = x["padding_mask"]
    cosine_term = (mask * (1 - cosine)).sum() / (mask.sum() + 1e-5)
    return ce_term, mlm_term, cosine_term


def test_distilbert_loss_matches_numpy():
    trainer = DistillationTrainer(masked_lm(1, seed=1), masked_lm(2, seed=2))
    x, y = make_batch()
    y_pred = trainer(x)
    loss = float(to_numpy(trainer.compute_loss(x, y, y_pred)))
    ce_term, mlm_term, cosine_term = np_losses(to_numpy(y_pred), x, y, temperature=2.0)
    np.testing.assert_allclose(loss, 5 * ce_term + 2 * mlm_term + cosine_term, rtol=1e-5)
    tracked = float(trainer.distillation_loss_tracker.result())
    np.testing.assert_allclose(tracked, ce_term, rtol=1e-5)
    np.testing.assert_allclose(float(trainer.cosine_loss_tracker.result()), cosine_term, rtol=1e-5)
    assert ce_term > 0.1 and cosine_term > 0.1


def test_hinton_weights_give_alpha_ce_plus_tempered_kl():
    """α·CE + (1−α)·T²·KL, with a narrower student (no cosine term)."""
    alpha, temperature = 0.1, 3.0
    student = masked_lm(1, seed=1, hidden_dim=8, intermediate_dim=16)
    trainer = DistillationTrainer(
        student,
        masked_lm(2, seed=2),
        temperature=temperature,
        ce_weight=1 - alpha,
        mlm_weight=alpha,
        cosine_weight=0.0,
    )
    x, y = make_batch()
    y_pred = trainer(x)
    loss = float(to_numpy(trainer.compute_loss(x, y, y_pred)))
    outputs = to_numpy(y_pred)
    outputs["teacher_hidden_states"] = outputs["hidden_states"]  # widths differ; unused
    ce_term, mlm_term, _ = np_losses(outputs, x, y, temperature)
    np.testing.assert_allclose(loss, alpha * mlm_term + (1 - alpha) * ce_term, rtol=1e-5)
    assert "cosine_loss" not in [metric.name for metric in trainer.metrics]


def test_teacher_is_frozen_and_the_student_learns():
    teacher, student = masked_lm(2, seed=2, dropout=0.1), masked_lm(1, seed=1)
    trainer = DistillationTrainer(student, teacher)
    assert not teacher.trainable and not any(v.trainable for v in teacher.weights)
    x, y = make_batch(batch=8)
    # The teacher runs in inference mode: its dropout stays off while the trainer trains.
    first, second = trainer(x, training=True), trainer(x, training=True)
    assert_close(first["teacher_logits"], second["teacher_logits"], atol=0)
    teacher_before = [to_numpy(w) for w in teacher.weights]
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = trainer.fit(x, y, batch_size=8, epochs=40, verbose=0).history
    assert {"loss", "distillation_loss", "mlm_loss", "mlm_accuracy", "cosine_loss"} <= set(history)
    losses = history["loss"]
    print(f"distillation: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    assert history["distillation_loss"][-1] < history["distillation_loss"][0]
    for before, after in zip(teacher_before, teacher.weights):
        np.testing.assert_array_equal(to_numpy(after), before)


CASE = paired_case(
    lambda: DistillationTrainer(masked_lm(1), masked_lm(2), temperature=3.0, ce_weight=0.5),
    make_batch,
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_the_teacher_stays_frozen_through_saving(tmp_path):
    """Every layer of the teacher, its heads included: on TensorFlow, a teacher loaded frozen kept its masked-LM
    head trainable (the setter skipped there), so the optimizer had other slots than the saved ones."""
    trainer = DistillationTrainer(masked_lm(1), masked_lm(2))
    trainer.save(tmp_path / "distillation.keras")
    loaded = keras.saving.load_model(tmp_path / "distillation.keras")
    assert not loaded.teacher.trainable and not any(v.trainable for v in loaded.teacher.weights)
    assert [v.path for v in loaded.trainable_variables] == [v.path for v in trainer.trainable_variables]


def test_distilbert_student_without_segments_from_a_bert_teacher():
    teacher = masked_lm(4, use_pooler=True)
    student = masked_lm(2, num_segments=0)
    init_student_from_teacher(student.backbone, teacher.backbone, layer_map=(1, 3))
    s, t = student.backbone, teacher.backbone
    for name in ("token_embedding", "position_embedding", "layer_norm"):
        for a, b in zip(getattr(s.embeddings, name).weights, getattr(t.embeddings, name).weights):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    for i, j in enumerate((1, 3)):
        student_block, teacher_block = s.transformer_layers[i], t.transformer_layers[j]
        assert len(student_block.weights) == len(teacher_block.weights) == 16
        for a, b in zip(student_block.weights, teacher_block.weights):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    # The student takes no segment_ids; the teacher still gets them from the batch.
    trainer = DistillationTrainer(student, teacher)
    x, _ = make_batch()
    outputs = to_numpy(trainer(x))
    assert outputs["hidden_states"].shape == (BATCH, LENGTH, 16)


def test_init_student_rejects_mismatches():
    teacher = masked_lm(4)
    with pytest.raises(ValueError, match="layer_map has 6 entries but the student has 2 encoder blocks"):
        init_student_from_teacher(masked_lm(2).backbone, teacher.backbone)
    with pytest.raises(ValueError, match=r"layer_map names teacher blocks \[4\], but the teacher has 4"):
        init_student_from_teacher(masked_lm(2).backbone, teacher.backbone, layer_map=(0, 4))
    narrow = masked_lm(2, intermediate_dim=24)
    before = [to_numpy(w) for w in narrow.backbone.weights]
    with pytest.raises(
        ValueError, match=r"block 0 \(teacher block 0\).*intermediate_dense/kernel' has shape \(16, 24\) in the student"
    ):
        init_student_from_teacher(narrow.backbone, teacher.backbone, layer_map=(0, 2))
    for old, new in zip(before, narrow.backbone.weights):  # nothing was written
        np.testing.assert_array_equal(to_numpy(new), old)


def test_trainer_rejects_incompatible_models():
    with pytest.raises(ValueError, match="cosine loss needs equal hidden widths"):
        DistillationTrainer(masked_lm(1, hidden_dim=8, intermediate_dim=16), masked_lm(2))
    with pytest.raises(ValueError, match=r"student's vocabulary \(50\) differs from the teacher's \(60\)"):
        DistillationTrainer(masked_lm(1, vocabulary_size=50), masked_lm(2))
    with pytest.raises(ValueError, match="teacher must be a masked-LM model"):
        DistillationTrainer(masked_lm(1), masked_lm(2).backbone)

"""Task-specific distillation: a student classifier trained on a teacher's soft labels (Hinton et al.)."""

import keras
from keras import ops

from kbert.arguments import number, positive_number
from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import labels, weights
from kbert.tasks.heads import labelled, task_targets
from kbert.training.losses import softened_kl, weighted_cross_entropy, weighted_mean
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.task import Task


@keras.saving.register_keras_serializable(package="kbert")
class ClassifierDistiller(Task):
    """Train a student `TextClassifier` on a teacher's logits for the same texts.

    The teacher's logits are targets, computed once per text beforehand (by
    any classifier: its tokenizer and size may differ from the student's), so
    the teacher runs once per text, not once per epoch; the texts need no
    labels, as in Tang et al. (2019), who label augmented copies of the
    training set (`kbert.text.text_augmentation`). After training, keep
    `distiller.student`.

    `compute_loss` (float32; `T` is `temperature`, `α` `hard_label_weight`):

    - `L_soft` = mean over rows of `T² · KL(softmax(t/T) ‖ softmax(s/T))`,
    - `L_hard = Σ w·CE(y, s) / (Σ w + 1e-5)` over the rows labelled `y ≥ 0`,
    - `L = (1 − α)·L_soft + α·L_hard` (Hinton et al.'s mix; docs/algorithms.md §7).

    Metrics: `distillation_loss` (`L_soft`) and `distillation_accuracy`
    (agreement with the teacher's top class); with `α > 0`, `label_loss` and
    `label_accuracy`.

    Args:
        student: a `TextClassifier` with two classes or more.
        temperature: softmax temperature `T` of both distributions.
        hard_label_weight: `α`, the weight of the hard-label loss, in `[0, 1]`.

    Call arguments:
        inputs: the student's inputs (`token_ids`, `padding_mask`, optionally `segment_ids`).
        training: whether the student's dropout is active.

    Returns:
        the student's logits `(batch, num_classes)`.

    Targets: dict with `teacher_logits` float `(batch, num_classes)` and,
    when `α > 0`, `labels` int `(batch,)` (-1 for an unlabelled row).

    Example:
    >>> import kbert, numpy as np
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50, max_positions=16)
    >>> distiller = ClassifierDistiller(kbert.tasks.TextClassifier(backbone, num_classes=3), temperature=2.0)
    >>> x = {"token_ids": np.ones((2, 8), "int32"), "padding_mask": np.ones((2, 8), "int32")}
    >>> y = {"teacher_logits": np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]], "float32")}
    >>> distiller.compile(optimizer="adam")
    >>> history = distiller.fit(x, y, epochs=1, verbose=0)
    >>> sorted(history.history)
    ['distillation_accuracy', 'distillation_loss', 'loss']

    References:
        - [Hinton et al., 2015](https://arxiv.org/abs/1503.02531) (knowledge distillation)
        - [Tang et al., 2019](https://arxiv.org/abs/1903.12136) (task-specific distillation from BERT)
    """

    CHECKED_BACKBONE = "student"
    TARGET_TABLE = {"teacher_logits": weights(("batch", "num_classes")), "labels": labels("num_classes")}

    def __init__(self, student, temperature=2.0, hard_label_weight=0.0, **kwargs):
        if getattr(student, "num_classes", 0) < 2 or not hasattr(student, "backbone"):
            raise ValueError(f"The student must be a TextClassifier with two classes or more; received "
                             f"{type(student).__name__} with num_classes {getattr(student, 'num_classes', None)}.")
        positive_number("temperature", temperature)
        number("hard_label_weight", hard_label_weight, 0, 1)
        super().__init__(dtype=student.dtype_policy, **kwargs)
        self.student = student
        self.temperature = temperature
        self.hard_label_weight = hard_label_weight
        self.num_classes = student.num_classes  # the targets' class axis (TARGET_TABLE)
        add_objective_metrics(self, "distillation")
        if hard_label_weight:
            add_objective_metrics(self, "label")
        self.built = True

    def call(self, inputs, training=None):
        return self.student(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`(1 − α)·L_soft + α·L_hard` in float32 (see the class docstring)."""
        keys = ("teacher_logits", "labels") if self.hard_label_weight else ("teacher_logits",)
        targets = task_targets(y, keys, "ClassifierDistiller", sample_weight)
        logits = ops.cast(y_pred, "float32")
        teacher_logits = ops.cast(targets["teacher_logits"], "float32")
        soft = weighted_mean(softened_kl(teacher_logits, logits, self.temperature), ops.ones_like(logits[:, 0]))
        loss = (1.0 - self.hard_label_weight) * track_objective(
            self, "distillation", soft, ops.argmax(teacher_logits, axis=-1), logits)
        if self.hard_label_weight:
            hard_labels, label_weights = labelled(targets["labels"])
            hard = weighted_cross_entropy(hard_labels, logits, label_weights)
            loss = loss + self.hard_label_weight * track_objective(
                self, "label", hard, hard_labels, logits, label_weights)
        return scale_loss_for_replicas(loss)

"""Knowledge distillation of a masked LM (DistilBERT, Hinton et al.) and student initialisation."""

import keras
from keras import ops

from kbert.arguments import number, positive_number
from kbert.backend.ops import scale_loss_for_replicas
from kbert.pretraining.bert_pretrainer import (
    MASKED_LM_INPUTS,
    masked_lm_loss,
    masked_lm_targets,
)
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.losses import softened_kl, weighted_mean
from kbert.training.task import Task, backbone_inputs, require_keys


def _check_masked_lm(model, role):
    if not (hasattr(model, "backbone") and hasattr(model, "mlm_head")):
        raise ValueError(
            f"The {role} must be a masked-LM model with `backbone` and `mlm_head` "
            f"attributes (e.g. BertPretrainer(backbone, pair_objective=None)); "
            f"received {type(model).__name__}."
        )


@keras.saving.register_keras_serializable(package="kbert")
class DistillationTrainer(Task):
    """Train a student masked LM against a frozen teacher's soft targets.

    Student and teacher are masked-LM models exposing `backbone` and
    `mlm_head` — a `BertPretrainer(backbone, pair_objective=None)` (or a
    `SpanBertPretrainer`, whose MLM head is used). The trainer runs each
    backbone once and its masked-LM head at `mask_positions`, so it gets both
    the logits and the last hidden states without changing what the
    pretrainers return. The teacher is set `trainable = False` and runs in
    inference mode under stop-gradient. After training, keep
    `trainer.student` (or `trainer.student.backbone`).

    `compute_loss` (float32, over prediction slots with weight > 0 and real
    tokens):

    - `L_ce = T² · Σ w·KL(softmax(t/T) ‖ softmax(s/T)) / (Σ w + 1e-5)`,
    - `L_mlm = Σ w·CE(y, s) / (Σ w + 1e-5)` with the hard labels `mask_ids`,
    - `L_cos = mean over real tokens of 1 − cos(h_s, h_t)` (last hidden
      states; needs equal widths),
    - `L = ce_weight·L_ce + mlm_weight·L_mlm + cosine_weight·L_cos`.

    The defaults are DistilBERT's `5·L_ce + 2·L_mlm + 1·L_cos` with `T = 2`.
    Hinton et al.'s `α·CE + (1−α)·T²·KL` is `mlm_weight=α`,
    `ce_weight=1−α`, `cosine_weight=0` (then the widths may differ). Unlike
    DistilBERT's default, which also matches the teacher on unmasked tokens,
    `L_ce` covers the masked predictions only, so the vocabulary logits are
    computed for `predictions` slots instead of the whole sequence.

    Metrics: `distillation_loss` (`L_ce`), `mlm_loss`, `mlm_accuracy`, and
    `cosine_loss` when `cosine_weight > 0`.

    Args:
        student: the masked-LM model to train.
        teacher: the masked-LM model to imitate (frozen); same vocabulary.
        temperature: softmax temperature `T` of the soft targets.
        ce_weight: weight of `L_ce` (the `T²`-scaled KL).
        mlm_weight: weight of the hard-label masked-LM loss.
        cosine_weight: weight of the hidden-state cosine loss.

    Call arguments:
        inputs: dict with the backbones' inputs (`segment_ids` may be left
            out for a backbone without segments; a teacher that takes them
            then gets zeros) and `mask_positions` int `(batch, predictions)`.
        training: whether the student's dropout is active.

    Returns:
        dict with `mlm_logits` and `teacher_logits`
        `(batch, predictions, vocabulary)`, `hidden_states` and
        `teacher_hidden_states` `(batch, sequence, hidden)`.

    Targets: dict with `mask_ids` int and `mask_weights` float `(batch, predictions)`.

    Example:
    >>> import kbert
    >>> from kbert.pretraining.bert_pretrainer import BertPretrainer
    >>> def masked_lm(layers):
    ...     return BertPretrainer(kbert.models.Encoder(vocabulary_size=60, num_layers=layers,
    ...         num_heads=2, hidden_dim=8, intermediate_dim=16, max_positions=16,
    ...         use_pooler=False), pair_objective=None)
    >>> teacher, student = masked_lm(4), masked_lm(2)
    >>> init_student_from_teacher(student.backbone, teacher.backbone, layer_map=(0, 2))
    >>> trainer = DistillationTrainer(student, teacher)
    >>> trainer.compile(optimizer="adam")  # then trainer.fit(dataset)

    References:
        - [Sanh et al., 2019](https://arxiv.org/abs/1910.01108) (DistilBERT)
        - [Hinton et al., 2015](https://arxiv.org/abs/1503.02531) (knowledge distillation)
    """

    # What `kbert.input_checks` checks: the student's inputs, and the targets.
    CHECKED_BACKBONE = "student"
    TARGET_TABLE = masked_lm_targets("student.backbone")

    def __init__(
        self,
        student,
        teacher,
        temperature=2.0,
        ce_weight=5.0,
        mlm_weight=2.0,
        cosine_weight=1.0,
        **kwargs,
    ):
        _check_masked_lm(student, "student")
        _check_masked_lm(teacher, "teacher")
        if student.backbone.vocabulary_size != teacher.backbone.vocabulary_size:
            raise ValueError(
                f"The student's vocabulary ({student.backbone.vocabulary_size}) differs "
                f"from the teacher's ({teacher.backbone.vocabulary_size})."
            )
        if cosine_weight and student.backbone.hidden_dim != teacher.backbone.hidden_dim:
            raise ValueError(
                f"The cosine loss needs equal hidden widths; the student has "
                f"{student.backbone.hidden_dim} and the teacher {teacher.backbone.hidden_dim}. "
                "Use cosine_weight=0.0."
            )
        positive_number("temperature", temperature)
        number("ce_weight", ce_weight, 0)
        number("mlm_weight", mlm_weight, 0)
        number("cosine_weight", cosine_weight, 0)
        super().__init__(dtype=student.dtype_policy, **kwargs)
        self.student = student
        self.teacher = teacher
        # The setter itself: TensorFlow's attribute tracking skips `teacher.trainable = False` where the flag is
        # False already (a teacher loaded frozen), which would leave the heads it made after `Layer.__init__`
        # trainable, and the optimizer's slots of a moved `.keras` on other variables.
        keras.layers.Layer.trainable.fset(self.teacher, False)
        self.temperature = temperature
        self.ce_weight = ce_weight
        self.mlm_weight = mlm_weight
        self.cosine_weight = cosine_weight
        add_objective_metrics(self, "distillation", accuracy=None)
        add_objective_metrics(self, "mlm")
        if cosine_weight:
            add_objective_metrics(self, "cosine", accuracy=None)
        self.built = True

    @staticmethod
    def _masked_lm(model, inputs, training):
        sequence = model.backbone(backbone_inputs(model.backbone, inputs), training=training)[
            "sequence_output"
        ]
        return model.mlm_head(sequence, inputs["mask_positions"]), sequence

    def call(self, inputs, training=None):
        require_keys(inputs, MASKED_LM_INPUTS, "inputs", "DistillationTrainer")
        logits, hidden = self._masked_lm(self.student, inputs, training)
        teacher_logits, teacher_hidden = self._masked_lm(self.teacher, inputs, False)
        return {
            "mlm_logits": logits,
            "teacher_logits": ops.stop_gradient(teacher_logits),
            "hidden_states": hidden,
            "teacher_hidden_states": ops.stop_gradient(teacher_hidden),
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The weighted sum of `L_ce`, `L_mlm`, `L_cos` in float32; `sample_weight` is unused."""
        require_keys(y, ("mask_ids", "mask_weights"), "targets", "DistillationTrainer")
        logits = ops.cast(y_pred["mlm_logits"], "float32")
        teacher_logits = ops.cast(y_pred["teacher_logits"], "float32")
        kl = softened_kl(teacher_logits, logits, self.temperature)
        distillation_loss = weighted_mean(kl, y["mask_weights"])
        track_objective(self, "distillation", distillation_loss)
        mlm_loss = masked_lm_loss(self, y, logits)
        loss = self.ce_weight * distillation_loss + self.mlm_weight * mlm_loss
        if self.cosine_weight:
            hidden = ops.cast(y_pred["hidden_states"], "float32")
            teacher_hidden = ops.cast(y_pred["teacher_hidden_states"], "float32")
            # PyTorch's cosine_similarity form: x·y / sqrt((‖x‖² + ε)(‖y‖² + ε)).
            cosine = ops.sum(hidden * teacher_hidden, axis=-1) / ops.sqrt(
                (ops.sum(hidden**2, axis=-1) + 1e-8) * (ops.sum(teacher_hidden**2, axis=-1) + 1e-8)
            )
            cosine_loss = weighted_mean(1.0 - cosine, x["padding_mask"])
            loss = loss + self.cosine_weight * track_objective(self, "cosine", cosine_loss)
        return scale_loss_for_replicas(loss)


def _check_compatible(student_layer, teacher_layer, what):
    student_weights, teacher_weights = student_layer.weights, teacher_layer.weights
    if len(student_weights) != len(teacher_weights):
        raise ValueError(
            f"Cannot initialise the student's {what} from the teacher's: the student "
            f"has {len(student_weights)} weights and the teacher {len(teacher_weights)}."
        )
    for student_weight, teacher_weight in zip(student_weights, teacher_weights):
        if tuple(student_weight.shape) != tuple(teacher_weight.shape):
            raise ValueError(
                f"Cannot initialise the student's {what} from the teacher's: "
                f"'{student_weight.path}' has shape {tuple(student_weight.shape)} in the "
                f"student but '{teacher_weight.path}' has {tuple(teacher_weight.shape)} "
                "in the teacher."
            )


def init_student_from_teacher(student_backbone, teacher_backbone, layer_map=(0, 2, 4, 7, 9, 11)):
    """Copy the teacher's embeddings and chosen encoder blocks into the student (DistilBERT).

    Student block `i` gets teacher block `layer_map[i]`; DistilBERT takes
    every other layer of BERT-base, `(0, 2, 4, 7, 9, 11)`. The token and
    position tables, the embedding LayerNorm and projection are copied; the
    segment table is copied when both have one (DistilBERT has none); the
    final LayerNorm (pre-LN) and the pooler are copied when both have them.
    A masked-LM head is not part of a backbone: copy it with
    `student.mlm_head.set_weights(teacher.mlm_head.get_weights())`.

    Args:
        student_backbone: the `Encoder` to initialise; `len(layer_map)` blocks.
        teacher_backbone: the trained `Encoder`.
        layer_map: teacher block index for each student block.

    Raises:
        ValueError: when the student's block count differs from
            `len(layer_map)`, an index is outside the teacher, the student
            shares one block across layers, or any copied weight's shape differs.

    Example:
    >>> import kbert
    >>> def encoder(layers):
    ...     return kbert.models.Encoder(vocabulary_size=30, num_layers=layers, num_heads=2,
    ...                                 hidden_dim=8, intermediate_dim=16, max_positions=16)
    >>> init_student_from_teacher(encoder(2), encoder(4), layer_map=(0, 3))
    """
    layer_map = tuple(int(index) for index in layer_map)
    if len(layer_map) != len(student_backbone.transformer_layers):
        raise ValueError(
            f"layer_map has {len(layer_map)} entries but the student has "
            f"{len(student_backbone.transformer_layers)} encoder blocks."
        )
    teacher_layers = len(teacher_backbone.transformer_layers)
    outside = [index for index in layer_map if not 0 <= index < teacher_layers]
    if outside:
        raise ValueError(
            f"layer_map names teacher blocks {outside}, but the teacher has {teacher_layers} "
            f"(indices 0..{teacher_layers - 1})."
        )
    if getattr(student_backbone, "share_layers", False) and len(set(layer_map)) > 1:
        raise ValueError(
            "The student shares one block across its layers (share_layers=True); it "
            "cannot take different teacher blocks."
        )

    student, teacher = student_backbone.embeddings, teacher_backbone.embeddings
    if (student.projection is None) != (teacher.projection is None):
        raise ValueError(
            "Cannot initialise the student's embeddings from the teacher's: only one "
            "of them projects the embedding width to the hidden width."
        )
    pairs = [
        (student.token_embedding, teacher.token_embedding, "token embedding"),
        (student.position_embedding, teacher.position_embedding, "position embedding"),
        (student.layer_norm, teacher.layer_norm, "embedding LayerNorm"),
    ]
    optional = [
        (student.projection, teacher.projection, "embedding projection"),
        (student.segment_embedding, teacher.segment_embedding, "segment embedding"),
        (student_backbone.final_layer_norm, teacher_backbone.final_layer_norm, "final LayerNorm"),
        (student_backbone.pooler, teacher_backbone.pooler, "pooler"),
    ]
    pairs += [(s, t, what) for s, t, what in optional if s is not None and t is not None]
    pairs += [
        (
            student_backbone.transformer_layers[i],
            teacher_backbone.transformer_layers[j],
            f"block {i} (teacher block {j})",
        )
        for i, j in enumerate(layer_map)
    ]
    # Check every pair before writing anything, so an error leaves the student untouched.
    for student_layer, teacher_layer, what in pairs:
        _check_compatible(student_layer, teacher_layer, what)
    for student_layer, teacher_layer, _ in pairs:
        for student_weight, teacher_weight in zip(student_layer.weights, teacher_layer.weights):
            student_weight.assign(teacher_weight.value)

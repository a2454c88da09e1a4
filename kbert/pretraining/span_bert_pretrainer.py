"""SpanBERT pretraining: masked LM plus the span boundary objective, no NSP."""

import keras

from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import PREDICTIONS, ids, positions
from kbert.layers.span_boundary_head import SpanBoundaryHead
from kbert.pretraining.bert_pretrainer import (
    MASKED_LM_INPUTS,
    masked_lm_head_for,
    masked_lm_loss,
    masked_lm_targets,
)
from kbert.training.objective_metrics import add_objective_metrics
from kbert.training.task import Task, backbone_inputs, require_keys

SPAN_INPUTS = MASKED_LM_INPUTS + ("span_left", "span_right", "span_offsets")


@keras.saving.register_keras_serializable(package="kbert")
class SpanBertPretrainer(Task):
    """A backbone with SpanBERT's heads: masked LM and span boundary objective (SBO).

    Both heads are tied to `backbone.token_embedding`: the masked-LM head as in
    `BertPretrainer`, the `SpanBoundaryHead` predicting each masked token from
    the hidden states just outside its span and its offset inside the span.
    One segment per example and no pair objective, as in SpanBERT, so build
    the backbone with `use_pooler=False` (an unused pooler gets no gradient).

    `compute_loss` returns `L_MLM + L_SBO` (weight 1), each
    `Σ w·CE / (Σ w + 1e-5)` over the prediction slots in float32; the metrics
    `mlm_loss`, `mlm_accuracy`, `sbo_loss`, `sbo_accuracy` are reported.

    Args:
        backbone: a `kbert.models.Encoder`.
        max_span_length: rows of the SBO offset table (15).
        position_embedding_dim: width of the SBO offset table (200).

    Call arguments:
        inputs: dict with the backbone's inputs, `mask_positions`, and
            `span_left`, `span_right` (positions `s−1` and `e+1` of each
            prediction's span), `span_offsets` (index inside the span), all int
            `(batch, predictions)`.
        training: whether dropout is active.

    Returns:
        dict with `mlm_logits` and `sbo_logits`, both `(batch, predictions, vocabulary)`.

    Targets: dict with `mask_ids` int and `mask_weights` float `(batch, predictions)`.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.Encoder(vocabulary_size=60, num_layers=1, num_heads=2,
    ...     hidden_dim=8, intermediate_dim=16, max_positions=16, use_pooler=False)
    >>> model = SpanBertPretrainer(backbone)
    >>> ones, zeros = keras.ops.ones((2, 8), "int32"), keras.ops.zeros((2, 8), "int32")
    >>> slots = keras.ops.ones((2, 3), "int32")
    >>> outputs = model({"token_ids": ones, "segment_ids": zeros, "padding_mask": ones,
    ...                  "mask_positions": slots, "span_left": slots - 1,
    ...                  "span_right": slots + 1, "span_offsets": slots - 1})
    >>> tuple(outputs["sbo_logits"].shape)
    (2, 3, 60)

    References:
        - [Joshi et al., 2020](https://arxiv.org/abs/1907.10529) (SpanBERT)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    INPUT_TABLE = {
        "mask_positions": positions(),
        "span_left": positions(),
        "span_right": positions(),
        "span_offsets": ids("max_span_length", PREDICTIONS),
    }
    TARGET_TABLE = masked_lm_targets("backbone")

    def __init__(self, backbone, max_span_length=15, position_embedding_dim=200, **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.max_span_length = max_span_length
        self.position_embedding_dim = position_embedding_dim
        self.mlm_head = masked_lm_head_for(backbone)
        self.sbo_head = SpanBoundaryHead(
            backbone.vocabulary_size,
            token_embedding=backbone.token_embedding,
            max_span_length=max_span_length,
            position_embedding_dim=position_embedding_dim,
            activation=backbone.activation,
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=backbone.initializer_range
            ),
            dtype=backbone.dtype_policy,
            name="sbo_head",
        )
        add_objective_metrics(self, "mlm")
        add_objective_metrics(self, "sbo")
        self.build()

    def build(self, input_shape=None):
        """Build the heads for the backbone's width (done at construction)."""
        self.mlm_head.build((None, None, self.backbone.hidden_dim))
        self.sbo_head.build((None, None, self.backbone.hidden_dim))

    def call(self, inputs, training=None):
        require_keys(inputs, SPAN_INPUTS, "inputs", "SpanBertPretrainer")
        sequence = self.backbone(backbone_inputs(self.backbone, inputs), training=training)[
            "sequence_output"
        ]
        return {
            "mlm_logits": self.mlm_head(sequence, inputs["mask_positions"]),
            "sbo_logits": self.sbo_head(
                sequence, inputs["span_left"], inputs["span_right"], inputs["span_offsets"]
            ),
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`L_MLM + L_SBO` in float32; `sample_weight` is unused (weights come from `y`)."""
        require_keys(y, ("mask_ids", "mask_weights"), "targets", "SpanBertPretrainer")
        mlm_loss = masked_lm_loss(self, y, y_pred["mlm_logits"])
        sbo_loss = masked_lm_loss(self, y, y_pred["sbo_logits"], objective="sbo")
        return scale_loss_for_replicas(mlm_loss + sbo_loss)

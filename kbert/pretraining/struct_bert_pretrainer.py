"""StructBERT pretraining: masked LM, the word-structural and the sentence-structural objective."""

import keras
from keras import ops

from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import ids, positions, weights
from kbert.pretraining.bert_pretrainer import (
    MASKED_LM_INPUTS,
    masked_lm_head_for,
    masked_lm_loss,
    masked_lm_targets,
)
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.task import Task, backbone_inputs, require_keys

# StructBERT's sentence-structural classes: next, previous, other document.
PAIR_CLASSES = 3
TARGETS = ("mask_ids", "mask_weights", "order_ids", "order_weights", "pair_labels")


@keras.saving.register_keras_serializable(package="kbert")
class StructBertPretrainer(Task):
    """A BERT encoder with StructBERT's three heads (Wang et al., 2019).

    - masked LM: BERT's tied head at `mask_positions`;
    - word-structural: the same tied head at `order_positions`, the positions
      of the shuffled trigrams, predicting the token that stood there;
    - sentence-structural: `Dense(3)` on the pooled output: the second
      segment follows the first (0), precedes it (1) or comes from another
      document (2).

    `L = L_MLM + L_order + L_pair`: the first two `Σ w·CE / (Σ w + 1e-5)` over
    their slots, the last the mean cross-entropy, all in float32; reported as
    `mlm_*`, `order_*` and `pair_*` loss and accuracy. The data come from
    `pretraining_dataset(objective="structbert")`.

    Args:
        backbone: a `kbert.models.Encoder` with a pooler (BERT-shaped).

    Call arguments:
        inputs: dict with the backbone's inputs, `mask_positions` and
            `order_positions` int `(batch, slots)`.
        training: whether dropout is active.

    Returns:
        dict with `mlm_logits`, `order_logits` `(batch, slots, vocabulary)`
        and `pair_logits` `(batch, 3)`.

    Targets (`y` in `fit`): `mask_ids`, `mask_weights`, `order_ids`,
    `order_weights` `(batch, slots)` and `pair_labels` int `(batch,)`.

    Example:
    >>> import kbert
    >>> model = StructBertPretrainer(kbert.models.bert_tiny(num_layers=1, vocabulary_size=60))
    >>> x = {"token_ids": keras.ops.ones((2, 8), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 8), "int32"),
    ...      "mask_positions": keras.ops.ones((2, 3), "int32"),
    ...      "order_positions": keras.ops.ones((2, 6), "int32")}
    >>> outputs = model(x)
    >>> tuple(outputs["order_logits"].shape), tuple(outputs["pair_logits"].shape)
    ((2, 6, 60), (2, 3))

    References:
        - [Wang et al., 2019](https://arxiv.org/abs/1908.04577) (StructBERT)
    """

    INPUT_TABLE = {"mask_positions": positions(), "order_positions": positions(("batch", "order"))}
    TARGET_TABLE = {
        **masked_lm_targets("backbone"),
        "order_ids": ids("backbone.vocabulary_size", ("batch", "order")),
        "order_weights": weights(("batch", "order")),
        "pair_labels": ids(PAIR_CLASSES, ("batch",)),
    }

    def __init__(self, backbone, **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.mlm_head = masked_lm_head_for(backbone)
        self.pair_head = keras.layers.Dense(
            PAIR_CLASSES,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=backbone.initializer_range),
            dtype=backbone.dtype_policy,
            name="pair_head",
        )
        for objective in ("mlm", "order", "pair"):
            add_objective_metrics(self, objective)
        self.build()

    def build(self, input_shape=None):
        """Build the heads for the backbone's width (done at construction)."""
        self.mlm_head.build((None, None, self.backbone.hidden_dim))
        self.pair_head.build((None, self.backbone.hidden_dim))

    def call(self, inputs, training=None):
        require_keys(inputs, (*MASKED_LM_INPUTS, "order_positions"), "inputs", "StructBertPretrainer")
        outputs = self.backbone(backbone_inputs(self.backbone, inputs), training=training)
        sequence = outputs["sequence_output"]
        return {
            "mlm_logits": self.mlm_head(sequence, inputs["mask_positions"]),
            "order_logits": self.mlm_head(sequence, inputs["order_positions"]),
            "pair_logits": self.pair_head(outputs["pooled_output"]),
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`L_MLM + L_order + L_pair` in float32; `sample_weight` is unused."""
        require_keys(y, TARGETS, "targets", "StructBertPretrainer")
        loss = masked_lm_loss(self, y, y_pred["mlm_logits"])
        order = {"mask_ids": y["order_ids"], "mask_weights": y["order_weights"]}
        loss = loss + masked_lm_loss(self, order, y_pred["order_logits"], "order")
        pair_logits = ops.cast(y_pred["pair_logits"], "float32")
        pair_loss = ops.mean(keras.losses.sparse_categorical_crossentropy(
            y["pair_labels"], pair_logits, from_logits=True
        ))
        loss = loss + track_objective(self, "pair", pair_loss, y["pair_labels"], pair_logits)
        return scale_loss_for_replicas(loss)

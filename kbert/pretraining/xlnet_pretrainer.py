"""XLNet pretraining: permutation language modelling on the query stream."""

import keras
from keras import ops

from kbert.backend.ops import scale_loss_for_replicas
from kbert.layers.language_model_head import LanguageModelHead
from kbert.pretraining.bert_pretrainer import masked_lm_loss, masked_lm_targets
from kbert.training.objective_metrics import add_objective_metrics
from kbert.training.task import Task, require_keys


@keras.saving.register_keras_serializable(package="kbert")
class XLNetPretrainer(Task):
    """An `XLNet` with its LM head, trained by permutation language modelling.

    The head is XLNet's `lm_loss`: `logits = g · Wtokᵀ + b`, tied to the
    backbone's token table (a `LanguageModelHead`). The logits are read from
    the query stream at the predicted positions (`target_mapping`), which
    sees each target's position but not its token, and, under the
    `permutation_mask`, only the tokens before it in the factorization order.
    Without a `target_mapping` the head reads the content stream, as
    transformers' `XLNetLMHeadModel` does.

    The loss is `Σ w·CE / (Σ w + 1e-5)` over the prediction slots in float32
    (weight 0 for slots that only pad), reported as `plm_loss` and
    `plm_accuracy`. The data come from `pretraining_dataset(objective="plm")`
    (`kbert.pretraining.PermutationMasker`).

    Args:
        backbone: a `kbert.models.XLNet`.

    Call arguments:
        inputs: dict with the backbone's inputs (`segment_ids` may be left
            out for zeros) and `permutation_mask` `(batch, sequence,
            sequence)`, `target_mapping` `(batch, predictions, sequence)`.
        training: whether dropout is active.

    Returns:
        dict with `plm_logits` `(batch, predictions, vocabulary)`.

    Targets (`y` in `fit`): dict with `mask_ids` int `(batch, predictions)`,
    the original tokens, and `mask_weights` float `(batch, predictions)`.

    Example:
    >>> import numpy as np, kbert
    >>> backbone = kbert.models.xlnet_tiny(vocabulary_size=40, num_layers=1)
    >>> model = XLNetPretrainer(backbone)
    >>> x = {"token_ids": np.ones((2, 6), "int32"), "padding_mask": np.ones((2, 6), "int32"),
    ...      "permutation_mask": np.zeros((2, 6, 6), "float32"),
    ...      "target_mapping": np.eye(6, dtype="float32")[None, :2].repeat(2, 0)}
    >>> tuple(model(x)["plm_logits"].shape)
    (2, 2, 40)

    References:
        - [Yang et al., 2019](https://arxiv.org/abs/1906.08237)
    """

    TARGET_TABLE = masked_lm_targets("backbone")

    def __init__(self, backbone, **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.lm_head = LanguageModelHead(
            backbone.vocabulary_size, token_embedding=backbone.token_embedding,
            dtype=backbone.dtype_policy, name="lm_head",
        )
        add_objective_metrics(self, "plm")
        self.build()

    def build(self, input_shape=None):
        """Build the head for the backbone's width (done at construction)."""
        self.lm_head.build((None, None, self.backbone.hidden_dim))

    def call(self, inputs, training=None):
        require_keys(inputs, ("token_ids", "padding_mask"), "inputs", "XLNetPretrainer")
        inputs = dict(inputs)
        if inputs.get("segment_ids") is None:
            inputs["segment_ids"] = ops.zeros_like(inputs["token_ids"])
        outputs = self.backbone.run_layers(inputs, training=training)
        hidden = outputs.get("query_output", outputs["sequence_output"])
        return {"plm_logits": self.lm_head(hidden)}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The weighted cross-entropy of the query stream's logits, in float32."""
        require_keys(y, ("mask_ids", "mask_weights"), "targets", "XLNetPretrainer")
        return scale_loss_for_replicas(masked_lm_loss(self, y, y_pred["plm_logits"], "plm"))

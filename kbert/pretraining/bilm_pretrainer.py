"""ELMo's pretraining: forward and backward language models sharing the token encoder and softmax."""

import keras
from keras import ops

from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import ids
from kbert.pretraining.bert_pretrainer import masked_lm_loss
from kbert.training.objective_metrics import add_objective_metrics
from kbert.training.task import Task, backbone_inputs, require_keys

BILM_INPUTS = ("character_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="kbert")
class BiLMPretrainer(Task):
    """An `ELMo` backbone with its biLM objective (Peters et al. 2018, eq. of §3.1).

    The forward LM predicts token `k + 1` from the top forward state at `k`,
    the backward LM token `k − 1` from the top backward state at `k`; both go
    through one softmax (`Dense(vocabulary_size)`, a full softmax over word
    ids) and share the backbone's character encoder. `compute_loss` returns
    `(L_forward + L_backward) / 2` (AllenNLP's `LanguageModel`), each the mean
    cross-entropy over the pairs of real tokens, in float32; the metrics
    `forward_lm_loss`, `forward_lm_accuracy`, `backward_lm_loss` and
    `backward_lm_accuracy` are reported; `exp(loss)` is the perplexity.

    Args:
        backbone: a `kbert.models.ELMo`.
        vocabulary_size: output words (`kbert.pretraining.learn_word_vocabulary`).

    Call arguments:
        inputs: dict with `character_ids` and `padding_mask` (see `ELMo`).
        training: whether dropout is active.

    Returns:
        dict with `forward_logits` and `backward_logits`, `(batch, sequence, vocabulary)`.

    Targets: dict with `token_ids` int `(batch, sequence)`, the words' ids.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.ELMo(hidden_dim=4, cell_dim=8, filters=[(1, 4), (2, 4)])
    >>> model = BiLMPretrainer(backbone, vocabulary_size=30)
    >>> x = {"character_ids": keras.ops.ones((2, 5, 50), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 5), "int32")}
    >>> tuple(model(x)["backward_logits"].shape)
    (2, 5, 30)
    >>> model.compile(optimizer="adam")  # then model.fit(kbert.pretraining.bilm_dataset(...))
    """

    TARGET_TABLE = {"token_ids": ids("vocabulary_size")}

    def __init__(self, backbone, vocabulary_size, **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.vocabulary_size = vocabulary_size
        self.softmax = keras.layers.Dense(vocabulary_size, dtype=backbone.dtype_policy, name="softmax")
        add_objective_metrics(self, "forward_lm")
        add_objective_metrics(self, "backward_lm")
        self.build()

    def build(self, input_shape=None):
        """Build the softmax for the backbone's width (done at construction)."""
        self.softmax.build((None, None, self.backbone.hidden_dim))

    def call(self, inputs, training=None):
        require_keys(inputs, BILM_INPUTS, "inputs", "BiLMPretrainer")
        outputs = self.backbone(backbone_inputs(self.backbone, inputs), training=training)
        return {
            "forward_logits": self.softmax(outputs["forward_output"]),
            "backward_logits": self.softmax(outputs["backward_output"]),
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`(L_forward + L_backward) / 2` in float32; `sample_weight` is unused."""
        require_keys(y, ("token_ids",), "targets", "BiLMPretrainer")
        token_ids = y["token_ids"]
        padding = ops.cast(x["padding_mask"], "float32")
        pairs = padding[:, 1:] * padding[:, :-1]  # both tokens of (k, k + 1) real
        forward = masked_lm_loss(self, {"mask_ids": token_ids[:, 1:], "mask_weights": pairs},
                                 y_pred["forward_logits"][:, :-1], objective="forward_lm")
        backward = masked_lm_loss(self, {"mask_ids": token_ids[:, :-1], "mask_weights": pairs},
                                  y_pred["backward_logits"][:, 1:], objective="backward_lm")
        return scale_loss_for_replicas(0.5 * (forward + backward))

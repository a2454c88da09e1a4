"""BERT pretraining: masked LM plus an optional sentence-pair objective (NSP or SOP).

Besides `BertPretrainer`, this module holds the small pieces every kbert
pretrainer shares: the masked-LM loss with its metrics, and the tied
masked-LM head built from a backbone's own settings.
"""

import keras
import numpy as np
from keras import ops
from scipy.special import softmax

from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import PREDICTIONS, ids, positions, weights
from kbert.layers.masked_lm_head import MaskedLMHead
from kbert.text.text_checks import check_texts
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.losses import weighted_cross_entropy
from kbert.training.task import Task, backbone_inputs, require_keys

PAIR_OBJECTIVES = ("nsp", "sop", None)

# Inputs every pretrainer needs; `segment_ids` may be left out (zeros).
MASKED_LM_INPUTS = ("token_ids", "padding_mask", "mask_positions")


def masked_lm_loss(model, y, logits, objective="mlm"):
    """`weighted_cross_entropy` of `logits` against the targets `y`, recorded in `model`'s metrics.

    `y` holds `mask_ids` and `mask_weights`; the loss and the weighted accuracy
    go to the `objective` metrics (`add_objective_metrics`).
    """
    logits = ops.cast(logits, "float32")
    loss = weighted_cross_entropy(y["mask_ids"], logits, y["mask_weights"])
    return track_objective(model, objective, loss, y["mask_ids"], logits, y["mask_weights"])


def masked_lm_targets(backbone_attribute):
    """The masked-LM targets' rules for `kbert.input_checks`: ids of the named backbone's vocabulary.

    >>> sorted(masked_lm_targets("backbone"))
    ['mask_ids', 'mask_weights']
    """
    return {
        "mask_ids": ids(f"{backbone_attribute}.vocabulary_size", PREDICTIONS),
        "mask_weights": weights(),
    }


def masked_lm_head_for(backbone, name="mlm_head"):
    """A `MaskedLMHead` tied to `backbone.token_embedding`, with the backbone's settings.

    The transform width is the table's width (ALBERT and ELECTRA project H→E),
    the activation, LayerNorm epsilon and initializer range are the backbone's.
    The owner builds it for the backbone's hidden width.
    """
    return MaskedLMHead(
        backbone.vocabulary_size,
        token_embedding=backbone.token_embedding,
        activation=backbone.activation,
        layer_norm_epsilon=backbone.layer_norm_epsilon,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=backbone.initializer_range),
        dtype=backbone.dtype_policy,
        name=name,
    )


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(Task):
    """A backbone with BERT's pretraining heads: masked LM and NSP or SOP.

    The masked-LM head (`Dense → GELU → LayerNorm → tied decoder + bias`) is
    tied to `backbone.token_embedding`; its transform projects to the table's
    width, so ALBERT's factorized embedding (E < H) works. For `"nsp"` and
    `"sop"` a `Dense(2)` reads the pooled output. The two objectives share the
    head and differ only in the data (NSP: label 1 = random next segment; SOP:
    label 1 = swapped order), so `pair_objective` names the objective for the
    config and the metrics, and `None` drops the pair head (RoBERTa; build
    the backbone with `use_pooler=False` then, or the pooler gets no gradient).

    Losses live in `compute_loss`: `L = L_MLM + L_pair` with
    `L_MLM = Σ w·CE / (Σ w + 1e-5)` over the prediction slots (weight 0 for
    padding slots) and `L_pair` the mean pair cross-entropy, both in float32.
    Train with `compile(optimizer=...)` and `fit` on any backend; the metrics
    `mlm_loss`, `mlm_accuracy` (weighted by `mask_weights`), and for a pair
    objective `pair_loss`, `pair_accuracy`, are reported next to `loss`.

    The head settings (activation, LayerNorm epsilon, initializer range) are
    the backbone's. The config serializes the backbone; `from_config` rebuilds
    the tied head on the deserialized backbone's table.

    Args:
        backbone: a `kbert.models.Encoder` (dict inputs, `sequence_output` and
            `pooled_output`, a `token_embedding` table).
        pair_objective: `"nsp"`, `"sop"` or `None`.

    Call arguments:
        inputs: dict with the backbone's inputs (`token_ids`, `segment_ids`,
            `padding_mask`, all `(batch, sequence)`; `segment_ids` may be
            left out for all zeros) and `mask_positions` int
            `(batch, predictions)`.
        training: whether dropout is active.

    Returns:
        dict with `mlm_logits` `(batch, predictions, vocabulary)` and, for a
        pair objective, `pair_logits` `(batch, 2)`.

    Targets (`y` in `fit`): dict with `mask_ids` int `(batch, predictions)`,
    `mask_weights` float `(batch, predictions)` and, for a pair objective,
    `pair_labels` int `(batch,)`.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.Encoder(vocabulary_size=60, num_layers=1, num_heads=2,
    ...     hidden_dim=8, intermediate_dim=16, max_positions=16)
    >>> model = BertPretrainer(backbone, pair_objective="nsp")
    >>> x = {"token_ids": keras.ops.ones((2, 8), "int32"),
    ...      "segment_ids": keras.ops.zeros((2, 8), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 8), "int32"),
    ...      "mask_positions": keras.ops.ones((2, 3), "int32")}
    >>> outputs = model(x)
    >>> tuple(outputs["mlm_logits"].shape), tuple(outputs["pair_logits"].shape)
    ((2, 3, 60), (2, 2))
    >>> model.compile(optimizer="adam")  # then model.fit(dataset)

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805) (BERT, NSP)
        - [Lan et al., 2020](https://arxiv.org/abs/1909.11942) (ALBERT, SOP)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    INPUT_TABLE = {"mask_positions": positions()}
    TARGET_TABLE = {**masked_lm_targets("backbone"), "pair_labels": ids(2, ("batch",))}

    def __init__(self, backbone, pair_objective="nsp", **kwargs):
        if pair_objective not in PAIR_OBJECTIVES:
            raise ValueError(
                f"Unknown pair_objective {pair_objective!r}; expected one of {PAIR_OBJECTIVES}."
            )
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.pair_objective = pair_objective
        self.mlm_head = masked_lm_head_for(backbone)
        self.pair_head = None
        if pair_objective is not None:
            self.pair_head = keras.layers.Dense(
                2,
                kernel_initializer=keras.initializers.TruncatedNormal(
                    stddev=backbone.initializer_range
                ),
                dtype=backbone.dtype_policy,
                name="pair_head",
            )
        add_objective_metrics(self, "mlm")
        if pair_objective is not None:
            add_objective_metrics(self, "pair")
        self.build()

    def build(self, input_shape=None):
        """Build the heads for the backbone's width (done at construction)."""
        self.mlm_head.build((None, None, self.backbone.hidden_dim))
        if self.pair_head is not None:
            self.pair_head.build((None, self.backbone.hidden_dim))

    def call(self, inputs, training=None):
        require_keys(inputs, MASKED_LM_INPUTS, "inputs", "BertPretrainer")
        outputs = self.backbone(backbone_inputs(self.backbone, inputs), training=training)
        y_pred = {"mlm_logits": self.mlm_head(outputs["sequence_output"], inputs["mask_positions"])}
        if self.pair_head is not None:
            y_pred["pair_logits"] = self.pair_head(outputs["pooled_output"])
        return y_pred

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`L_MLM + L_pair` in float32; `sample_weight` is unused (weights come from `y`)."""
        keys = ["mask_ids", "mask_weights"]
        if self.pair_head is not None:
            keys.append("pair_labels")
        require_keys(y, keys, "targets", "BertPretrainer")
        loss = masked_lm_loss(self, y, y_pred["mlm_logits"])
        if self.pair_head is not None:
            pair_logits = ops.cast(y_pred["pair_logits"], "float32")
            pair_loss = ops.mean(
                keras.losses.sparse_categorical_crossentropy(
                    y["pair_labels"], pair_logits, from_logits=True
                )
            )
            loss = loss + track_objective(self, "pair", pair_loss, y["pair_labels"], pair_logits)
        return scale_loss_for_replicas(loss)

    def fill_mask(self, texts, top_k=5, batch_size=32):
        """The `top_k` most likely tokens, with their probabilities, for each mask token of texts.

        Needs `self.preprocessor`; the mask is the tokenizer's (`[MASK]` for
        WordPiece, `<mask>` for RoBERTa's byte-level BPE), written in the text.

        Returns:
            Per text, `{"predictions": [[{"token", "token_id", "score"}, ... top_k], ... one list
            per mask]}`; one dict for one string.

        Example:
        ```python
        pretrainer.fill_mask("Paris is the [MASK] of France.", top_k=2)
        # {"predictions": [[{"token": "capital", "token_id": 3007, "score": 0.91}, ...]]}
        ```
        """
        preprocessor = self.text_preprocessor("fill_mask")
        texts, single = check_texts(texts)
        if int(top_k) < 1:
            raise ValueError(f"top_k must be at least 1; received {top_k}.")
        inputs = preprocessor.encode(texts)
        positions = [np.flatnonzero(row == preprocessor.tokenizer.mask_id) for row in inputs["token_ids"]]
        for index, found in enumerate(positions):
            if not found.size:
                raise ValueError(f"text {index} has no mask token (within the first "
                                 f"{preprocessor.sequence_length} tokens) to fill.")
        inputs["mask_positions"] = np.zeros((len(texts), max(map(len, positions))), np.int32)
        for index, found in enumerate(positions):
            inputs["mask_positions"][index, : len(found)] = found
        logits = predict_by_length(self, inputs, batch_size)["mlm_logits"]
        scores = softmax(np.asarray(logits, np.float64), axis=-1)
        results = []
        for row, found in zip(scores, positions):
            best = np.argsort(-row[: len(found)], axis=-1, kind="stable")[:, : int(top_k)]
            results.append({"predictions": [
                [{"token": preprocessor.token_string(i), "token_id": int(i), "score": float(slot[i])} for i in ids]
                for slot, ids in zip(row, best)]})
        return results[0] if single else results

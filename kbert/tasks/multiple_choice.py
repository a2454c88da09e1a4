"""Multiple choice (SWAG) over any kbert encoder."""

import keras
from keras import ops

from kbert.arguments import integer
from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import check_ids_in_range, labels
from kbert.tasks.heads import (
    ENCODER_INPUTS,
    encode,
    feature_route,
    head_dense,
    head_dropout,
    labelled,
    task_targets,
)
from kbert.tasks.text_results import probabilities
from kbert.text.text_checks import check_texts
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.losses import weighted_cross_entropy
from kbert.training.task import Task, require_keys


@keras.saving.register_keras_serializable(package="kbert")
class MultipleChoice(Task):
    """A backbone that scores each (context, ending) pair and picks one of `num_choices`.

    The inputs hold every choice, `(batch, num_choices, sequence)`, each
    packed as `[CLS] context [SEP] ending [SEP]`. They are flattened to
    `(batch·num_choices, sequence)` through the encoder, and
    `pooled_output → dropout → Dense(1)` gives one score per pair, reshaped
    to `(batch, num_choices)` logits. The loss is the mean softmax
    cross-entropy over the choices, in float32, `Σ w·CE / (Σ w + 1e-5)` with
    weight 0 for rows labelled -1 (which only pad a batch); the metric
    `accuracy`.

    Args:
        backbone: a kbert encoder (dict inputs, `pooled_output`).
        num_choices: choices per example (SWAG: 4).
        dropout: rate of the head's dropout.
        features: what the head reads: `"sequence_output"` (fine-tune the
            whole encoder, the head on `pooled_output`), or the first
            position of a frozen encoder's `"scalar_mix"`,
            `"scalar_mix_layer_norm"` or `"last_four"` features (see
            `kbert.tasks.encoder_features.EncoderFeatures`).

    Call arguments:
        inputs: dict with `token_ids` and `padding_mask`, optionally
            `segment_ids` (and on Longformer `global_attention_mask`), each
            `(batch, num_choices, sequence)`. A different number of choices
            raises a `ValueError`.
        training: whether dropout is active.

    Returns:
        logits `(batch, num_choices)`.

    Targets (`y` in `fit`): dict with `labels` int `(batch,)`, the index of
    the right choice (-1 for a row left out).

    Example:
    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50, max_positions=16)
    >>> model = MultipleChoice(backbone, num_choices=4)
    >>> x = {"token_ids": keras.ops.ones((2, 4, 8), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 4, 8), "int32")}
    >>> tuple(model(x).shape)
    (2, 4)

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805) §4.4 (SWAG)
    """

    # What `kbert.input_checks` checks: the backbone's inputs, one per choice, and the labels.
    BACKBONE_EXTRA_DIMS = ("num_choices",)
    TARGET_TABLE = {"labels": labels("num_choices")}

    def __init__(self, backbone, num_choices, dropout=0.1, features="sequence_output", **kwargs):
        integer("num_choices", num_choices, minimum=2)
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.num_choices = int(num_choices)
        self.dropout = dropout
        self.features = features
        self.encoder_features = feature_route(backbone, features, "MultipleChoice")
        self.dropout_layer = head_dropout(backbone, dropout)
        self.output_dense = head_dense(backbone, 1, "output_dense")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.build()

    def build(self, input_shape=None):
        """Build the head for the backbone's width (done at construction)."""
        self.output_dense.build((None, self.encoder_features.output_dim))

    def _flatten_choices(self, inputs):
        """Every `(batch, num_choices, sequence)` input as `(batch·num_choices, sequence)`."""
        require_keys(inputs, ENCODER_INPUTS, "inputs", "MultipleChoice")
        flat = {}
        for name, value in inputs.items():
            if value is None:
                continue
            shape = tuple(value.shape)
            if len(shape) != 3 or shape[1] != self.num_choices:
                raise ValueError(
                    f"MultipleChoice input '{name}' must have shape (batch, num_choices="
                    f"{self.num_choices}, sequence); received shape {shape}."
                )
            flat[name] = ops.reshape(value, (-1, ops.shape(value)[2]))
        return flat

    def call(self, inputs, training=None):
        flat = self._flatten_choices(inputs)
        outputs = encode(self.backbone, flat, "MultipleChoice", training, self.encoder_features)
        pooled = self.dropout_layer(outputs["pooled_output"], training=training)
        return ops.reshape(self.output_dense(pooled), (-1, self.num_choices))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean softmax cross-entropy over the choices, in float32."""
        labels = task_targets(y, ("labels",), "MultipleChoice", sample_weight)["labels"]
        labels, weights = labelled(labels)
        check_ids_in_range(labels, self.num_choices, "MultipleChoice label")
        logits = ops.cast(y_pred, "float32")
        self.accuracy.update_state(labels, logits, sample_weight=weights)
        return scale_loss_for_replicas(weighted_cross_entropy(labels, logits, weights))

    def choose(self, contexts, endings, batch_size=32):
        """The ending that best follows each context, and every ending's probability.

        Needs `self.preprocessor`. Each (context, ending) pair is packed as
        `[CLS] context [SEP] ending [SEP]`, as in training.

        Args:
            contexts: a string or a list of strings.
            endings: for one context, its `num_choices` endings; for a list,
                one such list per context.

        Returns:
            Per context, `{"choice": index, "ending": text, "scores": [probability, ...]}`;
            one dict for one string.

        Example:
        ```python
        model.choose("She opened the door", ["and walked in.", "and the sky is green."])
        # {"choice": 0, "ending": "and walked in.", "scores": [0.9, 0.1]}
        ```
        """
        preprocessor = self.text_preprocessor("choose")
        contexts, single = check_texts(contexts, "context")
        endings = [endings] if single else endings
        if len(endings) != len(contexts):
            raise ValueError(f"{len(contexts)} contexts but {len(endings)} lists of endings.")
        flat = []
        for index, row in enumerate(endings):
            row, _ = check_texts(row, f"context {index}'s ending")
            if len(row) != self.num_choices:
                raise ValueError(f"Context {index} has {len(row)} endings; this model chooses among "
                                 f"{self.num_choices}.")
            flat += row
        inputs = preprocessor.encode([c for c in contexts for _ in range(self.num_choices)], flat)
        inputs = {name: value.reshape(len(contexts), self.num_choices, -1) for name, value in inputs.items()}
        scores = probabilities(predict_by_length(self, inputs, batch_size))
        results = [{"choice": int(row.argmax()), "ending": ends[int(row.argmax())], "scores": row.tolist()}
                   for row, ends in zip(scores, endings)]
        return results[0] if single else results

"""Sentence and sentence-pair classification and regression (GLUE) over any kbert encoder."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import positive_int
from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import check_ids_in_range, labels
from kbert.layers.activations import get_activation, serialize_activation
from kbert.tasks.heads import encode, feature_route, head_dense, head_dropout, labelled, task_targets
from kbert.tasks.text_results import classification_results
from kbert.text.last_token_layout import layout_for
from kbert.text.text_checks import check_texts
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.losses import weighted_cross_entropy, weighted_mean
from kbert.training.task import Task


def _first_token_global(backbone, inputs):
    """`inputs` with a `global_attention_mask` on the first token added, for a Longformer backbone.

    Unchanged when the backbone takes no global mask or the inputs carry one.
    """
    takes_global = "global_attention_mask" in backbone.input
    if not takes_global or not isinstance(inputs, dict) or "global_attention_mask" in inputs:
        return inputs
    token_ids = inputs.get("token_ids")
    if token_ids is None:
        return inputs  # `encode` names the missing input
    if isinstance(token_ids, np.ndarray):  # NumPy stays NumPy: Keras refuses a nested argument that mixes
        first = np.zeros(token_ids.shape, "int32")  # arrays and tensors (a loaded model's first JAX `predict`)
        first[:, 0] = 1
        return {**inputs, "global_attention_mask": first}
    first = ops.cast(ops.arange(ops.shape(token_ids)[1]) == 0, "int32")
    return {**inputs, "global_attention_mask": first[None, :] * ops.ones_like(token_ids)}


@keras.saving.register_keras_serializable(package="kbert")
class TextClassifier(Task):
    """A backbone with a classification (or regression) head on the first token.

    Two heads, the two that the BERT family's published classifiers use:

    - `hidden_activation=None` (BERT, ALBERT): `pooled_output → dropout →
      Dense(num_classes)`. Without a pooler, `pooled_output` is the first
      token's hidden state.
    - `hidden_activation="tanh"` (RoBERTa, Longformer, XLNet), `"gelu"`
      (ELECTRA), `"relu"` (DistilBERT): `sequence_output[:, 0] → dropout →
      Dense(H, activation) → dropout → Dense(num_classes)`. (DistilBERT has
      no dropout before its hidden layer; the two agree at inference.) An
      XLNet backbone is summarised by its last token (its
      `summary_token_index` is -1: XLNet puts `<cls>` last and pads left),
      in `pooled_output` as here.

    With a feature route (`features="scalar_mix"` or `"last_four"`) the
    encoder is frozen and both heads read the first ([CLS]) position of its
    features in place of `pooled_output` and `sequence_output[:, 0]`: the
    pooler, trained only for next-sentence prediction if at all, is not used.

    `num_classes=1` is regression (STS-B): the loss is the mean squared error
    and the metric `mean_squared_error`. Otherwise the loss is the mean
    softmax cross-entropy and the metric `accuracy`. Losses are computed in
    float32 in `compute_loss`, as `Σ w·loss / (Σ w + 1e-5)`: rows labelled -1
    (NaN for regression), which only pad a batch, have weight 0.

    Sentence pairs are packed by the data pipeline as `[CLS] A [SEP] B [SEP]`
    with `segment_ids` 0 then 1. On a Longformer backbone the first token is
    made global when the inputs carry no `global_attention_mask`, as the
    Longformer paper and Hugging Face do for classification.

    Args:
        backbone: a kbert encoder (dict inputs, `sequence_output` and
            `pooled_output`).
        num_classes: classes, or 1 for regression.
        dropout: rate of the head's dropout.
        hidden_activation: the activation of a hidden `Dense(H)` layer on the
            first token, or `None` for no hidden layer (see above).
        features: what the head reads, one of `kbert.tasks.encoder_features.FEATURES`
            (`"sequence_output"` fine-tunes the whole encoder; see `EncoderFeatures`).

    Call arguments:
        inputs: dict with `token_ids` and `padding_mask` `(batch, sequence)`,
            optionally `segment_ids` (zeros when left out) and, on
            Longformer, `global_attention_mask`.
        training: whether dropout is active.

    Returns:
        logits `(batch, num_classes)` (the predicted value for regression).

    Targets (`y` in `fit`): dict with `labels`: int `(batch,)` class ids, or
    float `(batch,)` values for regression; -1 (NaN) for a row left out.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50, max_positions=16)
    >>> model = TextClassifier(backbone, num_classes=3)
    >>> x = {"token_ids": keras.ops.ones((2, 8), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 8), "int32")}
    >>> tuple(model(x).shape)
    (2, 3)
    >>> model.compile(optimizer="adam")  # then model.fit(x, {"labels": labels})
    >>> frozen = TextClassifier(backbone, num_classes=3, features="scalar_mix")
    >>> tuple(frozen(x).shape), [w.name for w in frozen.trainable_weights]
    ((2, 3), ['layer_weights', 'gamma', 'kernel', 'bias'])

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805) (BERT, GLUE)
        - [Liu et al., 2019](https://arxiv.org/abs/1907.11692) (RoBERTa's head)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    TARGET_TABLE = {"labels": labels("num_classes")}

    def __init__(self, backbone, num_classes, dropout=0.1, hidden_activation=None,
                 features="sequence_output", **kwargs):
        positive_int("num_classes", num_classes)  # 1 is regression
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = dropout
        self.hidden_activation = serialize_activation(hidden_activation)
        self.features = features
        self.encoder_features = feature_route(backbone, features, "TextClassifier")
        self.dropout_layer = head_dropout(backbone, dropout)
        self.hidden_dense = None
        if hidden_activation is not None:
            self.hidden_dense = head_dense(
                backbone, backbone.hidden_dim, "hidden_dense", get_activation(hidden_activation)
            )
        self.output_dense = head_dense(backbone, self.num_classes, "output_dense")
        if self.num_classes == 1:
            self.label_metric = keras.metrics.MeanSquaredError(name="mean_squared_error")
        else:
            self.label_metric = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.build()

    def build(self, input_shape=None):
        """Build the head for the backbone's width (done at construction)."""
        width = self.encoder_features.output_dim
        if self.hidden_dense is not None:
            self.hidden_dense.build((None, width))
        self.output_dense.build((None, self.backbone.hidden_dim if self.hidden_dense else width))

    def call(self, inputs, training=None):
        inputs = _first_token_global(self.backbone, inputs)
        outputs = encode(self.backbone, inputs, "TextClassifier", training, self.encoder_features)
        if self.hidden_dense is None:
            features = outputs["pooled_output"]
        else:
            summary = getattr(self.backbone, "summary_token_index", 0)
            features = self.dropout_layer(outputs["sequence_output"][:, summary, :], training=training)
            features = self.hidden_dense(features)
        return self.output_dense(self.dropout_layer(features, training=training))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean cross-entropy, or mean squared error for regression, over the labelled rows."""
        labels = task_targets(y, ("labels",), "TextClassifier", sample_weight)["labels"]
        logits = ops.cast(y_pred, "float32")
        if self.num_classes > 1:
            labels, weights = labelled(labels)
            check_ids_in_range(labels, self.num_classes, "TextClassifier label")
            self.label_metric.update_state(labels, logits, sample_weight=weights)
            return scale_loss_for_replicas(weighted_cross_entropy(labels, logits, weights))
        predictions = logits[:, 0]
        labels = ops.reshape(ops.cast(labels, "float32"), ops.shape(predictions))
        weights = ops.cast(ops.logical_not(ops.isnan(labels)), "float32")
        labels = ops.where(weights > 0, labels, 0.0)
        self.label_metric.update_state(labels[:, None], predictions[:, None], weights)
        return scale_loss_for_replicas(weighted_mean(ops.square(predictions - labels), weights))

    def classify(self, texts, text_pairs=None, batch_size=32):
        """Label names with probabilities (a value, for regression) for texts or text pairs.

        Needs `self.preprocessor` (a `kbert.text.TextPreprocessor`; its
        `labels` name the classes, `LABEL_i` when it has none). Texts are
        packed as in training, `[CLS] A [SEP] (B [SEP])` (XLNet:
        `A <sep> (B <sep>) <cls>`, padded on the left), cut to its `sequence_length`.

        Args:
            texts: a string or a list of strings.
            text_pairs: the second texts (as many), or `None`.
            batch_size: rows per model call.

        Returns:
            Per text, `{"label", "score", "scores": {label: probability}}`
            (softmax), or `{"value"}` for regression; one dict for one string.

        Example:
        ```python
        classifier.classify("A fine film.")  # {"label": "positive", "score": 0.93, "scores": {...}}
        ```
        """
        preprocessor = self.text_preprocessor("classify")
        texts, single = check_texts(texts)
        pairs = None
        if text_pairs is not None:
            pairs, _ = check_texts([text_pairs] if single and isinstance(text_pairs, str) else text_pairs,
                                   "text pair")
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} text pairs; give one pair per text.")
        inputs = layout_for(self.backbone, preprocessor.encode(texts, pairs))
        logits = predict_by_length(self, inputs, batch_size)
        results = classification_results(logits, preprocessor.label_name)
        return results[0] if single else results

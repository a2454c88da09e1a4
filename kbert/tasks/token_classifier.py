"""Token tagging (CoNLL-2003 NER) over any kbert encoder."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import integer
from kbert.backend.ops import scale_loss_for_replicas
from kbert.input_checks import TOKENS, check_ids_in_range, labels
from kbert.tasks.heads import encode, feature_route, head_dense, head_dropout, labelled, task_targets
from kbert.tasks.text_results import merge_entities, probabilities, tagged_pieces
from kbert.text.last_token_layout import layout_for
from kbert.text.text_checks import check_texts
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.losses import weighted_cross_entropy
from kbert.training.task import Task


@keras.saving.register_keras_serializable(package="kbert")
class TokenClassifier(Task):
    """A backbone with a tag classifier on every token.

    The head is `sequence_output → dropout → Dense(num_labels)`. With a
    feature route (`features="scalar_mix"` or `"last_four"`) it reads the
    frozen encoder's features in place of `sequence_output`: the BERT paper's
    feature-based NER (§5.3), ELMo's recipe.

    As in the BERT paper, a word's label sits on its first sub-token; the
    other sub-tokens, the special tokens and the padding carry the label -1
    (any negative label, Hugging Face's -100 included) and count neither in
    the loss nor in the metric. The loss is the mean cross-entropy over the
    labelled real tokens, `Σ w·CE / (Σ w + 1e-5)` with `w = (label ≥ 0) ·
    padding_mask`, in float32; the metric `accuracy` is over the same tokens.

    Args:
        backbone: a kbert encoder (dict inputs, `sequence_output`); its
            pooler is unused (build it with `use_pooler=False`).
        num_labels: tags (e.g. 9 for CoNLL-2003's IOB2 tags).
        dropout: rate of the head's dropout.
        features: what the head reads, one of `kbert.tasks.encoder_features.FEATURES`
            (`"sequence_output"` fine-tunes the whole encoder; see `EncoderFeatures`).

    Call arguments:
        inputs: dict with `token_ids` and `padding_mask` `(batch, sequence)`,
            optionally `segment_ids` and (Longformer) `global_attention_mask`.
        training: whether dropout is active.

    Returns:
        logits `(batch, sequence, num_labels)`.

    Targets (`y` in `fit`): dict with `labels` int `(batch, sequence)`, -1
    where a token is left out.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50, max_positions=16)
    >>> model = TokenClassifier(backbone, num_labels=9)
    >>> x = {"token_ids": keras.ops.ones((2, 8), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 8), "int32")}
    >>> tuple(model(x).shape)
    (2, 8, 9)
    >>> deep = kbert.models.bert_tiny(num_layers=4, vocabulary_size=50, max_positions=16)
    >>> tagger = TokenClassifier(deep, num_labels=9, features="last_four")
    >>> tuple(tagger(x).shape), len(tagger.trainable_weights)  # the head's kernel and bias
    ((2, 8, 9), 2)

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805) §5.3 (NER)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    TARGET_TABLE = {"labels": labels("num_labels", TOKENS)}

    def __init__(self, backbone, num_labels, dropout=0.1, features="sequence_output", **kwargs):
        integer("num_labels", num_labels, minimum=2)
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.num_labels = int(num_labels)
        self.dropout = dropout
        self.features = features
        self.encoder_features = feature_route(backbone, features, "TokenClassifier")
        self.dropout_layer = head_dropout(backbone, dropout)
        self.output_dense = head_dense(backbone, self.num_labels, "output_dense")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.build()

    def build(self, input_shape=None):
        """Build the head for the backbone's width (done at construction)."""
        self.output_dense.build((None, None, self.encoder_features.output_dim))

    def call(self, inputs, training=None):
        outputs = encode(self.backbone, inputs, "TokenClassifier", training, self.encoder_features)
        sequence = self.dropout_layer(outputs["sequence_output"], training=training)
        return self.output_dense(sequence)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean cross-entropy over the tokens with a label ≥ 0 inside the padding mask."""
        labels = task_targets(y, ("labels",), "TokenClassifier", sample_weight)["labels"]
        labels = ops.convert_to_tensor(labels)
        if len(labels.shape) != 2:
            raise ValueError(
                "TokenClassifier labels must have shape (batch, sequence); "
                f"received shape {tuple(labels.shape)}."
            )
        labels, weights = labelled(labels)
        check_ids_in_range(labels, self.num_labels, "TokenClassifier label")
        weights = weights * ops.cast(x["padding_mask"], "float32")
        loss = weighted_cross_entropy(labels, y_pred, weights)
        self.accuracy.update_state(labels, ops.cast(y_pred, "float32"), sample_weight=weights)
        return scale_loss_for_replicas(loss)

    def tag(self, texts, batch_size=32):
        """The entities of texts: label, character span, text and score, merged from word pieces.

        Needs `self.preprocessor` (its `labels` are the tags, e.g. IOB2's
        `B-PER`, `I-PER`, `O`). A word takes its first piece's tag and
        probability; neighbouring words of one type merge into an entity
        scored by their mean; `O` words are left out (transformers'
        `aggregation_strategy="first"`). Tokens past the preprocessor's
        `sequence_length` are not tagged.

        Returns:
            Per text, `{"entities": [{"label", "start", "end", "text", "score"}, ...]}`
            (`text[start:end]` is the entity's text); one dict for one string.

        Example:
        ```python
        tagger.tag("Ada Lovelace lived in London.")
        # {"entities": [{"label": "PER", "start": 0, "end": 12, "text": "Ada Lovelace", ...}, ...]}
        ```
        """
        preprocessor = self.text_preprocessor("tag")
        texts, single = check_texts(texts)
        inputs, offsets = preprocessor.encode_with_offsets(texts)
        moved = layout_for(self.backbone, {**inputs, "starts": offsets[..., 0], "ends": offsets[..., 1]})
        offsets = np.stack([moved.pop("starts"), moved.pop("ends")], axis=-1)
        inputs = moved
        scores = probabilities(predict_by_length(self, inputs, batch_size, sequence_outputs=True))
        results = []
        for text, token_ids, row_offsets, row_scores in zip(texts, inputs["token_ids"], offsets, scores):
            pieces = tagged_pieces(text, token_ids, row_offsets, row_scores, preprocessor)
            results.append({"entities": merge_entities(text, pieces, preprocessor.label_name)})
        return results[0] if single else results

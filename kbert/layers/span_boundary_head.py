import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.input_checks import check_ids_in_range
from kbert.layers.initializers import clone_initializer
from kbert.layers.sequence_shape import check_sequence_shape
from kbert.layers.vocabulary_head import VocabularyHead


@keras.saving.register_keras_serializable(package="kbert")
class SpanBoundaryHead(VocabularyHead):
    """SpanBERT's span boundary objective (SBO) head.

    Each masked token at relative index `k` inside the span `s..e` is predicted
    from the span's boundary tokens and its offset:
    `x = [h_{s−1}; h_{e+1}; P_k]` with `P` a learned table of
    `max_span_length` rows of width `position_embedding_dim` (200), then
    `LN(act(W1·x))` (2H+200 → H), `LN(act(W2·…))` (H → E) and the vocabulary
    decoder plus a bias. With `token_embedding` (a `ReversibleEmbedding`,
    usually the backbone's) the decoder is tied to the input table as in
    SpanBERT, and `E` is the table's width (= H for BERT); without it the
    head owns a decoder matrix (see `VocabularyHead`).

    Args:
        vocabulary_size: size of the output vocabulary.
        token_embedding: optional `ReversibleEmbedding` to tie the decoder to.
        embedding_dim: width of the second transform when untied; defaults
            to the input width.
        max_span_length: rows of the offset table (SpanBERT: 15 targets per span).
        position_embedding_dim: width of the offset table (SpanBERT: 200).
        activation: transform activation (SpanBERT: exact GELU).
        layer_norm_epsilon: LayerNorm epsilon (1e-12).
        kernel_initializer: initializer of the transforms, the offset table
            and an untied decoder.

    Call arguments:
        inputs: hidden states `(batch, sequence, hidden)`.
        span_left: int `(batch, predictions)`: position `s−1` of each
            prediction's span.
        span_right: int `(batch, predictions)`: position `e+1`.
        span_offsets: int `(batch, predictions)` in `[0, max_span_length)`:
            index of the prediction inside its span.

    Example:
    >>> head = SpanBoundaryHead(vocabulary_size=50)
    >>> positions = keras.ops.zeros((2, 3), "int32")
    >>> logits = head(keras.ops.ones((2, 7, 16)), positions, positions, positions)
    >>> tuple(logits.shape)
    (2, 3, 50)

    References:
        - [Joshi et al., 2020](https://arxiv.org/abs/1907.10529) (SpanBERT)
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        embedding_dim=None,
        max_span_length=15,
        position_embedding_dim=200,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(
            vocabulary_size,
            token_embedding,
            embedding_dim,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        self.max_span_length = positive_int("max_span_length", max_span_length)
        self.position_embedding_dim = positive_int("position_embedding_dim", position_embedding_dim)

    def build(
        self, inputs_shape, span_left_shape=None, span_right_shape=None, span_offsets_shape=None
    ):
        check_sequence_shape(self, inputs_shape)
        hidden_dim = inputs_shape[-1]
        width = self.embedding_dim or hidden_dim
        self.position_embedding = keras.layers.Embedding(
            self.max_span_length,
            self.position_embedding_dim,
            embeddings_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.position_embedding.build((None, None))
        self.hidden_dense = self._dense(hidden_dim, "hidden_dense")
        self.hidden_dense.build((None, None, 2 * hidden_dim + self.position_embedding_dim))
        self.hidden_layer_norm = self._layer_norm("hidden_layer_norm")
        self.hidden_layer_norm.build((None, None, hidden_dim))
        self.output_dense = self._dense(width, "output_dense")
        self.output_dense.build((None, None, hidden_dim))
        self.output_layer_norm = self._layer_norm("output_layer_norm")
        self.output_layer_norm.build((None, None, width))
        self.build_decoder(width)
        self.built = True

    def call(self, inputs, span_left, span_right, span_offsets):
        for name, value in (
            ("span_left", span_left),
            ("span_right", span_right),
            ("span_offsets", span_offsets),
        ):
            if len(value.shape) != 2:
                raise ValueError(
                    f"{name} must have shape (batch, predictions); "
                    f"received shape {tuple(value.shape)}."
                )
        if inputs.shape[1] is not None:
            check_ids_in_range(span_left, inputs.shape[1], "Span boundary position")
            check_ids_in_range(span_right, inputs.shape[1], "Span boundary position")
        check_ids_in_range(span_offsets, self.max_span_length, "Span offset")
        left = ops.take_along_axis(inputs, ops.cast(span_left, "int32")[:, :, None], axis=1)
        right = ops.take_along_axis(inputs, ops.cast(span_right, "int32")[:, :, None], axis=1)
        offsets = self.position_embedding(ops.cast(span_offsets, "int32"))
        x = ops.concatenate([left, right, offsets], axis=-1)
        x = self.hidden_layer_norm(self.hidden_dense(x))
        return self.decode(self.output_layer_norm(self.output_dense(x)))

    def compute_output_shape(self, inputs_shape, span_left_shape, *args):
        return tuple(span_left_shape) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        config["max_span_length"] = self.max_span_length
        config["position_embedding_dim"] = self.position_embedding_dim
        return config

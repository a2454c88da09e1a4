import keras
from keras import ops

from kbert.backend_utils import check_ids_in_range
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.initializers import clone_initializer
from kbert.layers.reversible_embedding import tied_embedding_dim


@keras.saving.register_keras_serializable(package="kbert")
class SpanBoundaryHead(keras.layers.Layer):
    """SpanBERT's span boundary objective (SBO) head.

    Each masked token at relative index `k` inside the span `s..e` is predicted
    from the span's boundary tokens and its offset:
    `x = [h_{s−1}; h_{e+1}; P_k]` with `P` a learned table of
    `max_span_length` rows of width `position_embedding_dim` (200), then
    `LN(act(W1·x))` (2H+200 → H), `LN(act(W2·…))` (H → E) and the vocabulary
    decoder plus a bias. With `token_embedding` (a `ReversibleEmbedding`,
    usually the backbone's) the decoder is tied to the input table as in
    SpanBERT, and `E` is the table's width (= H for BERT); without it the
    head owns a decoder matrix.

    `token_embedding` is a reference to another model's layer and is not part
    of `get_config`: a model that owns both passes it again when rebuilt.

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
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.token_embedding = token_embedding
        self.embedding_dim = tied_embedding_dim(token_embedding, self.vocabulary_size, embedding_dim)
        self.max_span_length = int(max_span_length)
        self.position_embedding_dim = int(position_embedding_dim)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _dense(self, units, activation, name):
        return keras.layers.Dense(
            units,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def _layer_norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def build(
        self, inputs_shape, span_left_shape=None, span_right_shape=None, span_offsets_shape=None
    ):
        if len(inputs_shape) != 3:
            raise ValueError(
                "SpanBoundaryHead expects inputs of shape (batch, sequence, hidden); "
                f"received shape {tuple(inputs_shape)}."
            )
        hidden_dim = inputs_shape[-1]
        width = self.embedding_dim or hidden_dim
        activation = get_activation(self.activation)
        self.position_embedding = keras.layers.Embedding(
            self.max_span_length,
            self.position_embedding_dim,
            embeddings_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.position_embedding.build((None, None))
        self.hidden_dense = self._dense(hidden_dim, activation, "hidden_dense")
        self.hidden_dense.build((None, None, 2 * hidden_dim + self.position_embedding_dim))
        self.hidden_layer_norm = self._layer_norm("hidden_layer_norm")
        self.hidden_layer_norm.build((None, None, hidden_dim))
        self.output_dense = self._dense(width, activation, "output_dense")
        self.output_dense.build((None, None, hidden_dim))
        self.output_layer_norm = self._layer_norm("output_layer_norm")
        self.output_layer_norm.build((None, None, width))
        self.decoder = None
        if self.token_embedding is None:
            self.decoder = keras.layers.Dense(
                self.vocabulary_size,
                use_bias=False,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name="decoder",
            )
            self.decoder.build((None, None, width))
        self.bias = self.add_weight(
            name="bias", shape=(self.vocabulary_size,), initializer="zeros"
        )
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
        x = self.output_layer_norm(self.output_dense(x))
        if self.token_embedding is not None:
            logits = self.token_embedding(x, reverse=True)
        else:
            logits = self.decoder(x)
        return logits + ops.cast(self.bias, logits.dtype)

    def compute_output_shape(self, inputs_shape, span_left_shape, *args):
        return tuple(span_left_shape) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "max_span_length": self.max_span_length,
                "position_embedding_dim": self.position_embedding_dim,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config

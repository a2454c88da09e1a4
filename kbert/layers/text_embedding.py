import keras
from keras import ops

from kbert.arguments import non_negative_int, positive_int, positive_number, probability
from kbert.input_checks import check_ids_in_range
from kbert.layers.dropout import Dropout, apply_dropout, checked_dropout_prng
from kbert.layers.fused_dense import FusedDense
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.reversible_embedding import ReversibleEmbedding


@keras.saving.register_keras_serializable(package="kbert")
class TextEmbedding(keras.layers.Layer):
    """Token + position + segment embeddings, then LayerNorm and dropout.

    The input layer of BERT and its relatives. With `embedding_dim` smaller than
    `hidden_dim` the sum is taken at width `embedding_dim` and a Dense layer
    projects it to `hidden_dim` (ALBERT's factorized embedding, ELECTRA's
    `embeddings_project`).

    Positions are `0 .. n-1` by default. With `position_offset=k > 0` they follow
    RoBERTa: real tokens are numbered `k, k+1, ...` in order and padding tokens
    get row `k - 1` (the padding row), computed from `padding_mask`.

    Args:
        vocabulary_size: rows of the token table.
        hidden_dim: width of the output.
        max_positions: rows of the position table (512 for BERT, 514 for RoBERTa).
        num_segments: rows of the segment table; 0 for none (DistilBERT).
        embedding_dim: width of the tables; defaults to `hidden_dim`.
        position_offset: first position of a real token (RoBERTa: 2).
        dropout: dropout rate after LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12, RoBERTa: 1e-5).
        initializer_range: std of the truncated-normal initializer.
        dropout_prng: the JAX generator of the dropout mask (see
            `kbert.layers.Dropout`); None: the process default.

    Call arguments:
        token_ids: int `(batch, sequence)`.
        segment_ids: optional int `(batch, sequence)`; zeros when omitted.
        padding_mask: optional 0/1 `(batch, sequence)`; needed for offsets.
        training: whether dropout is active.

    Example:
    >>> layer = TextEmbedding(vocabulary_size=100, hidden_dim=16, max_positions=32)
    >>> tuple(layer(keras.ops.ones((2, 8), "int32")).shape)
    (2, 8, 16)
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        max_positions=512,
        num_segments=2,
        embedding_dim=None,
        position_offset=0,
        dropout=0.1,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        dropout_prng=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dropout_prng = checked_dropout_prng(dropout_prng)
        self.vocabulary_size = positive_int("vocabulary_size", vocabulary_size)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        self.max_positions = positive_int("max_positions", max_positions)
        self.num_segments = non_negative_int("num_segments", num_segments)
        self.embedding_dim = positive_int(
            "embedding_dim", hidden_dim if embedding_dim is None else embedding_dim
        )
        self.position_offset = non_negative_int("position_offset", position_offset)
        self.dropout = probability("dropout", dropout)
        self.layer_norm_epsilon = positive_number("layer_norm_epsilon", layer_norm_epsilon)
        self.initializer_range = positive_number("initializer_range", initializer_range)

        def initializer():
            return keras.initializers.TruncatedNormal(stddev=self.initializer_range)

        def table(layer_class, rows, name):
            """An embedding layer of `rows` vectors of `embedding_dim`."""
            return layer_class(
                rows, self.embedding_dim, embeddings_initializer=initializer(), dtype=self.dtype_policy, name=name
            )

        self.token_embedding = table(ReversibleEmbedding, self.vocabulary_size, "token_embedding")
        self.position_embedding = PositionEmbedding(
            self.max_positions,
            initializer=initializer(),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.segment_embedding = None
        if self.num_segments > 0:
            self.segment_embedding = table(keras.layers.Embedding, self.num_segments, "segment_embedding")
        self.layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = Dropout(
            self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng, name="dropout"
        )
        self.projection = None
        if self.embedding_dim != self.hidden_dim:
            self.projection = FusedDense(
                self.hidden_dim,
                kernel_initializer=initializer(),
                dtype=self.dtype_policy,
                name="projection",
            )

    def build(self, token_ids_shape, segment_ids_shape=None, padding_mask_shape=None):
        if len(token_ids_shape) != 2:
            raise ValueError(
                "TextEmbedding expects token_ids of shape (batch, sequence); "
                f"received shape {tuple(token_ids_shape)}."
            )
        embedded_shape = tuple(token_ids_shape) + (self.embedding_dim,)
        self.token_embedding.build(token_ids_shape)
        self.position_embedding.build(embedded_shape)
        if self.segment_embedding is not None:
            self.segment_embedding.build(token_ids_shape)
        self.layer_norm.build(embedded_shape)
        if self.projection is not None:
            self.projection.build(embedded_shape)
        self.built = True

    def call(self, token_ids, segment_ids=None, padding_mask=None, training=None):
        for name, value in (("segment_ids", segment_ids), ("padding_mask", padding_mask)):
            if value is not None and len(value.shape) != 2:
                raise ValueError(
                    f"{name} must have shape (batch, sequence); "
                    f"received shape {tuple(value.shape)}."
                )
        self._check_length(token_ids.shape[1])
        x = self.token_embedding(token_ids)
        if self.position_offset:
            if padding_mask is None:
                padding_mask = ops.ones_like(token_ids)
            mask = ops.cast(padding_mask, "int32")
            positions = ops.cumsum(mask, axis=1) * mask + (self.position_offset - 1)
            x = x + self.position_embedding(x, positions=positions)
        else:
            x = x + self.position_embedding(x)
        if self.segment_embedding is not None:
            if segment_ids is None:
                segment_ids = ops.zeros_like(token_ids)
            check_ids_in_range(segment_ids, self.num_segments, "Segment id")
            x = x + self.segment_embedding(segment_ids)
        x = self.layer_norm(x)
        x = apply_dropout(self.dropout_layer, x, training)
        if self.projection is not None:
            x = self.projection(x)
        return x

    def _check_length(self, length):
        usable = self.max_positions - self.position_offset
        if length is not None and length > usable:
            raise ValueError(
                f"Sequence length {length} exceeds the {usable} positions this "
                f"embedding serves (position table of {self.max_positions} rows"
                + (f", offset {self.position_offset})." if self.position_offset else ").")
            )

    def compute_output_shape(self, token_ids_shape, *args, **kwargs):
        self._check_length(token_ids_shape[1])
        return tuple(token_ids_shape) + (self.hidden_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "max_positions": self.max_positions,
                "num_segments": self.num_segments,
                "embedding_dim": self.embedding_dim,
                "position_offset": self.position_offset,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
                "dropout_prng": self.dropout_prng,
            }
        )
        return config

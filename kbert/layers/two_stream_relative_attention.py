"""XLNet's two-stream self-attention with Transformer-XL relative positions and segments."""

import keras
from keras import ops

from kbert.arguments import integer, positive_int, probability
from kbert.backend.ops import masked_score
from kbert.layers.dropout import Dropout, apply_dropout, checked_dropout_prng
from kbert.layers.layer_normalization import LayerNormalization

# The projections, each a `(hidden, heads, key_dim)` kernel as XLNet stores them.
PROJECTIONS = ("query", "key", "value", "output", "position")
# The per-head biases added to the queries: content (r_w), position (r_r), segment (r_s).
QUERY_BIASES = ("content_bias", "position_bias", "segment_bias")


def relative_position_encoding(query_length, key_length, hidden_dim, clamp_length=-1):
    """Transformer-XL's sinusoids `(query_length + key_length, hidden_dim)` for the distances
    `key_length, key_length - 1, ..., 1 - query_length` (sines, then cosines).

    `clamp_length > 0` clamps the distances to `[-clamp_length, clamp_length]`.

    >>> tuple(relative_position_encoding(3, 5, 8).shape)
    (8, 8)
    """
    frequencies = ops.arange(0, hidden_dim, 2, dtype="float32") / float(hidden_dim)
    inverse_frequencies = 1.0 / ops.power(10000.0, frequencies)
    distances = ops.cast(key_length - ops.arange(query_length + key_length), "float32")
    if clamp_length > 0:
        distances = ops.clip(distances, -float(clamp_length), float(clamp_length))
    angles = distances[:, None] * inverse_frequencies[None, :]
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


def relative_shift(scores, key_length):
    """Scores `(batch, heads, query, query + key)` over distances into `(batch, heads, query, key)`.

    Transformer-XL's shift: entry `(i, j)` takes distance column
    `query - i + j`, i.e. the distance `key - query + i - j` from query `i`
    (at position `key - query + i`) to key `j`.
    """
    batch, heads, query_length, distances = (ops.shape(scores)[axis] for axis in range(4))
    scores = ops.reshape(scores, (batch, heads, distances, query_length))[:, :, 1:, :]
    scores = ops.reshape(scores, (batch, heads, query_length, distances - 1))
    return scores[:, :, :, :key_length]


def two_stream_output_spec(layer, content, query=None):
    """What a two-stream layer returns on symbolic inputs: the content's spec, and the query's."""
    spec = keras.KerasTensor(content.shape, layer.compute_dtype)
    if query is None:
        return spec
    return spec, keras.KerasTensor(query.shape, layer.compute_dtype)


@keras.saving.register_keras_serializable(package="kbert")
class TwoStreamRelativeAttention(keras.layers.Layer):
    """XLNet's relative self-attention, for a content stream and an optional query stream.

    Both streams attend the content stream's keys and values (memory of the
    previous segment first, then this segment). Scores add three terms,
    scaled by `1/sqrt(key_dim)`:

    - content: `(q + r_w) · k_j`;
    - position: `(q + r_r) · R(i - j)`, `R` the projected sinusoid of the
      relative distance, aligned by Transformer-XL's relative shift;
    - segment: `(q + r_s) · s`, `s` one of two learned vectors for "same
      segment" and "different segment" (memory is segment 0).

    The content stream sees itself; the query stream (XLNet's `g`) carries
    the position but not the token: under a `permutation_mask` a target
    attends only what comes before it in the factorization order. Each
    stream's output is projected back, added to its input and
    layer-normalized (post-LN), as transformers' `XLNetRelativeAttention`.

    Args:
        num_heads: attention heads.
        key_dim: width of each head (`hidden / num_heads` in XLNet).
        dropout: rate on the attention probabilities and the projected output.
        layer_norm_epsilon: of the LayerNorm after the residual (1e-12).
        clamp_length: clamp relative distances to this, -1 for none.
        kernel_initializer: of the projections and biases (N(0, 0.02)).
        dropout_prng: the JAX generator of the dropout masks (see
            `kbert.layers.Dropout`); None: the process default.

    Call arguments:
        content: `(batch, sequence, hidden)`, the content stream `h`.
        segment_ids: int `(batch, sequence)`.
        padding_mask: 0/1 `(batch, sequence)`, 1 for real tokens.
        query: optional `(batch, predictions, hidden)`, the query stream `g`,
            with `target_mapping`.
        permutation_mask: optional 0/1 `(batch, sequence, sequence)`, 1
            where position `i` may NOT attend position `j` (transformers'
            `perm_mask`).
        target_mapping: one-hot `(batch, predictions, sequence)`: the
            position of each query-stream row.
        memory: optional `(batch, memory_length, hidden)`, the previous
            segment's inputs to this layer.
        training: dropout on or off.

    Returns:
        The content stream's output `(batch, sequence, hidden)`, or the pair
        `(content, query)` when `query` is given.

    Example:
    >>> attention = TwoStreamRelativeAttention(num_heads=2, key_dim=4)
    >>> h = keras.ops.ones((1, 3, 8))
    >>> ids, mask = keras.ops.zeros((1, 3), "int32"), keras.ops.ones((1, 3), "int32")
    >>> tuple(attention(h, ids, mask).shape)
    (1, 3, 8)
    >>> g = keras.ops.ones((1, 1, 8))
    >>> mapping = keras.ops.convert_to_tensor([[[0.0, 0.0, 1.0]]])
    >>> [tuple(x.shape) for x in attention(h, ids, mask, query=g, target_mapping=mapping)]
    [(1, 3, 8), (1, 1, 8)]

    References:
        - [Yang et al., 2019](https://arxiv.org/abs/1906.08237) (XLNet)
        - [Dai et al., 2019](https://arxiv.org/abs/1901.02860) (Transformer-XL)
    """

    def __init__(self, num_heads, key_dim, dropout=0.0, layer_norm_epsilon=1e-12,
                 clamp_length=-1, kernel_initializer=None, dropout_prng=None, **kwargs):
        super().__init__(**kwargs)
        self.dropout_prng = checked_dropout_prng(dropout_prng)
        self.num_heads = positive_int("num_heads", num_heads)
        self.key_dim = positive_int("key_dim", key_dim)
        self.dropout = probability("dropout", dropout)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.clamp_length = integer("clamp_length", clamp_length, -1)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.RandomNormal(stddev=0.02)
        )
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)
        self.layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )

    def build(self, content_shape, *args, **kwargs):
        self.hidden_dim = int(content_shape[-1])
        heads = (self.num_heads, self.key_dim)
        for name in PROJECTIONS:
            setattr(self, f"{name}_kernel", self.add_weight(
                (self.hidden_dim, *heads), self.kernel_initializer, name=f"{name}_kernel"))
        for name in QUERY_BIASES:
            setattr(self, name, self.add_weight(heads, self.kernel_initializer, name=name))
        self.segment_embedding = self.add_weight(
            (2, *heads), self.kernel_initializer, name="segment_embedding")
        self.layer_norm.build(content_shape)
        self.built = True

    def call(self, content, segment_ids, padding_mask, query=None, permutation_mask=None,
             target_mapping=None, memory=None, training=None):
        if (query is None) != (target_mapping is None):
            raise ValueError("The query stream needs both `query` and `target_mapping`.")
        keys_in = content if memory is None else ops.concatenate([memory, content], axis=1)
        memory_length = 0 if memory is None else ops.shape(memory)[1]
        key = ops.einsum("bjh,hnd->bjnd", keys_in, self.key_kernel)
        value = ops.einsum("bjh,hnd->bjnd", keys_in, self.value_kernel)
        length, key_length = ops.shape(content)[1], ops.shape(keys_in)[1]
        encoding = relative_position_encoding(length, key_length, self.hidden_dim, self.clamp_length)
        position = ops.einsum(
            "ph,hnd->pnd", ops.cast(encoding, self.compute_dtype), self.position_kernel
        )
        mismatch = self._segment_mismatch(segment_ids, memory_length)
        query_allowed = self._query_allowed(padding_mask, permutation_mask, memory_length)
        own = ops.arange(key_length)[None, :] == ops.arange(length)[:, None] + memory_length
        content_allowed = ops.logical_or(query_allowed, own[None])
        parts = (key, value, position, mismatch)
        heads = ops.einsum("bih,hnd->bind", content, self.query_kernel)
        content_out = self._post(content, self._attend(heads, parts, content_allowed, training), training)
        if query is None:
            return content_out
        mapping = ops.cast(target_mapping, self.compute_dtype)
        heads = ops.einsum("bmh,hnd->bmnd", query, self.query_kernel)
        heads = ops.einsum("bmnd,bml->blnd", heads, mapping)  # to the positions they predict
        attended = self._attend(heads, parts, query_allowed, training)
        attended = ops.einsum("blnd,bml->bmnd", attended, mapping)
        return content_out, self._post(query, attended, training)

    def _segment_mismatch(self, segment_ids, memory_length):
        """1.0 where query `i` and key `j` are in different segments `(batch, sequence, keys)`."""
        segment_ids = ops.cast(segment_ids, "int32")
        memory_segments = ops.zeros((ops.shape(segment_ids)[0], memory_length), "int32")
        key_segments = ops.concatenate([memory_segments, segment_ids], axis=1)
        different = ops.not_equal(segment_ids[:, :, None], key_segments[:, None, :])
        return ops.cast(different, self.compute_dtype)

    def _query_allowed(self, padding_mask, permutation_mask, memory_length):
        """True where `i` may attend key `j` `(batch, sequence, keys)`: memory, real, not blocked."""
        batch = ops.shape(padding_mask)[0]
        real = ops.concatenate(
            [ops.ones((batch, memory_length), "bool"), ops.cast(padding_mask, "bool")], axis=1
        )
        allowed = ops.broadcast_to(real[:, None, :], (batch, ops.shape(padding_mask)[1], ops.shape(real)[1]))
        if permutation_mask is None:
            return allowed
        open_memory = ops.zeros((batch, ops.shape(padding_mask)[1], memory_length), "bool")
        blocked = ops.concatenate([open_memory, ops.cast(permutation_mask, "bool")], axis=2)
        return ops.logical_and(allowed, ops.logical_not(blocked))

    def _attend(self, heads, parts, allowed, training):
        """The attention-weighted values `(batch, sequence, heads, key_dim)` of query `heads`."""
        key, value, position, mismatch = parts
        content_scores = ops.einsum("bind,bjnd->bnij", heads + self.content_bias, key)
        position_scores = ops.einsum("bind,pnd->bnip", heads + self.position_bias, position)
        position_scores = relative_shift(position_scores, ops.shape(key)[1])
        segment = ops.einsum("bind,snd->bnis", heads + self.segment_bias, self.segment_embedding)
        mismatch = mismatch[:, None]
        segment_scores = segment[..., :1] * (1.0 - mismatch) + segment[..., 1:] * mismatch
        scores = ops.cast(content_scores + position_scores + segment_scores, "float32")
        scores = ops.where(allowed[:, None], scores * self.key_dim**-0.5, masked_score("float32"))
        probabilities = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probabilities = apply_dropout(self.dropout_layer, probabilities, training)
        return ops.einsum("bnij,bjnd->bind", probabilities, value)

    def _post(self, residual, attended, training):
        # The output projection "bind,hnd->bih" as one matmul over the merged heads: PyTorch's einsum
        # runs it 3x slower (benchmarks/xlnet_evaluation.py).
        shape = ops.shape(attended)
        kernel = ops.reshape(self.output_kernel, (-1, shape[2] * shape[3]))
        output = ops.matmul(ops.reshape(attended, (shape[0], shape[1], -1)), ops.transpose(kernel))
        output = apply_dropout(self.dropout_layer, output, training)
        return self.layer_norm(output + residual)

    def compute_output_spec(self, content, *args, query=None, **kwargs):
        return two_stream_output_spec(self, content, query)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "clamp_length": self.clamp_length,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "dropout_prng": self.dropout_prng,
        }

import math

import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.backend.ops import take_indices
from kbert.backend.ops import positions_from
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class RelativePositionBias(DirectCall, keras.layers.Layer):
    """T5's bucketed relative position bias, added to the attention scores.

    The relative distance `r = key_position − query_position` is mapped to one
    of `num_buckets` buckets (docs/algorithms.md §8, HF:t5 `_relative_position_bucket`):
    bidirectionally (encoder), half the buckets per sign and `+num_buckets/2`
    when `r > 0`, with `n = |r|`; causally (decoder), all buckets over
    `n = max(−r, 0)`. With `m` half the buckets left for `n`, distances
    below `m` have a bucket each and larger ones share logarithmically sized
    buckets up to `max_distance`: `min(B−1, m + ⌊log(n/m)/log(max_distance/m)·(B−m)⌋)`.
    Each bucket holds one learned scalar per head.

    A T5 stack computes the bias once (in its first block, in the reference)
    and adds the same tensor in every layer.

    Args:
        num_heads: attention heads.
        num_buckets: buckets (T5: 32).
        max_distance: distance from which all buckets are the last (T5: 128).
        bidirectional: encoder (True) or causal decoder (False) bucketing.
        embeddings_initializer: initializer of the `(num_buckets, num_heads)` table.

    Call arguments:
        query: `(batch, query_length, ...)`; only its length is read.
        key: `(batch, key_length, ...)`; defaults to `query`.
        query_offset: position of the first query (int or scalar tensor), for
            incremental decoding with a key/value cache.

    Returns:
        `(1, num_heads, query_length, key_length)`.

    Example:
    >>> bias = RelativePositionBias(num_heads=4)
    >>> tuple(bias(keras.ops.ones((2, 5, 8))).shape)
    (1, 4, 5, 5)
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="random_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = positive_int("num_heads", num_heads)
        self.num_buckets = positive_int("num_buckets", num_buckets)
        self.max_distance = positive_int("max_distance", max_distance)
        self.bidirectional = bool(bidirectional)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        exact = self.num_buckets // (4 if self.bidirectional else 2)
        if exact < 1 or self.max_distance <= exact:
            raise ValueError(
                f"num_buckets={num_buckets} and max_distance={max_distance} leave no "
                "logarithmic buckets: need at least 4 (bidirectional) or 2 (causal) "
                "buckets and max_distance above the exact-distance range."
            )

    def build(self, query_shape, key_shape=None):
        if len(query_shape) < 2:
            raise ValueError(
                "RelativePositionBias expects query of shape (batch, length, ...); "
                f"received shape {tuple(query_shape)}."
            )
        self.embeddings = self.add_weight(
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
            name="embeddings",
        )
        self.built = True

    def bucket(self, relative_position):
        """Bucket index (int32) of each relative position `key − query`."""
        num_buckets = self.num_buckets
        relative_position = ops.cast(relative_position, "int32")
        # Bounds as tensors like `relative_position` (`zeros + c`): a Python
        # number given to `keras.ops` is a host-to-device copy on eager PyTorch.
        zeros = ops.zeros_like(relative_position)
        if self.bidirectional:
            num_buckets //= 2
            offset = ops.cast(relative_position > 0, "int32") * num_buckets
            distance = ops.abs(relative_position)
        else:
            offset = 0
            distance = -ops.minimum(relative_position, zeros)
        max_exact = num_buckets // 2
        ratio = ops.cast(ops.maximum(distance, zeros + 1), "float32") / max_exact
        large = max_exact + ops.cast(
            ops.log(ratio) / math.log(self.max_distance / max_exact) * (num_buckets - max_exact),
            "int32",
        )
        large = ops.minimum(large, zeros + (num_buckets - 1))
        return offset + ops.where(distance < max_exact, distance, large)

    def call(self, query, key=None, query_offset=0):
        key = query if key is None else key
        query_length = ops.shape(query)[1]
        key_length = ops.shape(key)[1]
        query_positions = positions_from(query_length, query_offset)
        key_positions = ops.arange(key_length, dtype="int32")
        buckets = self.bucket(key_positions[None, :] - query_positions[:, None])
        # Heads first before the lookup, so that the result is laid out as
        # returned (a fused attention kernel copies a strided bias at every call).
        table = ops.transpose(ops.cast(self.embeddings, self.compute_dtype))
        return ops.expand_dims(take_indices(table, buckets, axis=1), 0)

    def compute_output_shape(self, query_shape, key_shape=None):
        key_shape = query_shape if key_shape is None else key_shape
        return (1, self.num_heads, query_shape[1], key_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config

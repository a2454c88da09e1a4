"""Length buckets: the few padded lengths a batch of text may take, and batches of rows of similar length.

A batch is padded to the smallest bucket that holds its longest row, not to
the full sequence length: eager PyTorch then computes no padding it does not
need, and XLA (TensorFlow, JAX) compiles one program per bucket, a handful at
most. The buckets are powers of two from `SMALLEST_BUCKET` below the sequence
length, and the sequence length itself (docs/algorithms.md §25). NumPy only.
"""

import numpy as np

# The shortest padded length of a batch.
SMALLEST_BUCKET = 16


def bucket_lengths(sequence_length, smallest=SMALLEST_BUCKET):
    """The padded lengths of batches cut from rows of `sequence_length`: powers of two, then itself.

    >>> bucket_lengths(128), bucket_lengths(100), bucket_lengths(12)
    ([16, 32, 64, 128], [16, 32, 64, 100], [12])
    """
    sequence_length = int(sequence_length)
    buckets, length = [], int(smallest)
    while length < sequence_length:
        buckets.append(length)
        length *= 2
    return [*buckets, sequence_length]


def bucket_length(longest, buckets):
    """The smallest of `buckets` (ascending) that holds `longest` tokens; `longest` itself past the last.

    >>> bucket_length(17, [16, 32, 64]), bucket_length(1, [16, 32]), bucket_length(80, [16, 32, 64])
    (32, 16, 80)
    """
    for bucket in buckets:
        if longest <= bucket:
            return int(bucket)
    return int(longest)


def padded_rows(rows, batch_size):
    """Rows a short batch is padded to under a compiled predict: the next power of two, at most `batch_size`.

    A compiled function (XLA, `jax.jit`) compiles once per batch shape: a
    batch of any row count would compile again at the end of every call. With
    these counts a bucket compiles for a few row counts at most, and a padded
    batch computes less than twice its rows.

    >>> padded_rows(3, 32), padded_rows(17, 32), padded_rows(20, 24), padded_rows(32, 32)
    (4, 32, 24, 32)
    """
    rows, batch_size = int(rows), int(batch_size)
    return min(batch_size, 1 << max(rows - 1, 0).bit_length())


def row_lengths(padding_mask):
    """Real tokens of each row (of each example, the longest of its choices for `(batch, choices, L)`).

    >>> row_lengths(np.array([[1, 1, 0], [1, 0, 0]])).tolist()
    [2, 1]
    """
    lengths = np.asarray(padding_mask).sum(axis=-1)
    return lengths.reshape(len(lengths), -1).max(axis=-1)


def length_batches(lengths, batch_size):
    """Row indices in batches of `batch_size`, the rows sorted by length (ties in input order).

    >>> [batch.tolist() for batch in length_batches([5, 2, 9, 2, 4], 2)]
    [[1, 3], [4, 0], [2]]
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be at least 1; received {batch_size}.")
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[start : start + int(batch_size)] for start in range(0, len(order), int(batch_size))]


def model_bucket_lengths(backbone, sequence_length, traced=False):
    """`bucket_lengths(sequence_length)` for `backbone`, or `[sequence_length]` where a shorter batch
    would change its results: sparse attention planned per length (BigBird) past the length it attends
    in full. Longformer rounds to its window inside the layer, and its results do not depend on padding.

    `traced`: for batches of a `tf.data` pipeline, which TensorFlow traces at an unknown length:
    sparse attention (BigBird, Longformer) needs its length static, and keeps `[sequence_length]`.

    >>> class Dense:
    ...     attention = "dense"
    >>> model_bucket_lengths(Dense(), 64)
    [16, 32, 64]
    """
    attention = getattr(backbone, "attention", "dense")
    if traced and attention != "dense":
        return [int(sequence_length)]
    if attention != "bigbird":
        return bucket_lengths(sequence_length)
    full = [layer.full_attention_length for layer in backbone._flatten_layers(include_self=False)
            if hasattr(layer, "full_attention_length")]
    if sequence_length <= min(full, default=0):
        return bucket_lengths(sequence_length)
    return [int(sequence_length)]

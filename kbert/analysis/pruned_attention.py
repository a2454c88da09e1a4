"""What pruning heads keeps: the heads of each layer, and an attention layer's sliced weights.

Shared by `prune_heads` for encoders and for T5.
"""

import keras
import numpy as np


def kept_heads(counts, heads_to_prune, stack="the encoder", note=""):
    """The heads each layer keeps, a list of index lists, for layers of `counts` heads.

    `heads_to_prune` (`{layer: [heads]}`) is checked: `stack` and `note` go
    into the errors.

    >>> kept_heads([3, 2], {0: [1]})
    [[0, 2], [0, 1]]
    """
    kept = [list(range(count)) for count in counts]
    for layer, heads in heads_to_prune.items():
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < len(counts):
            raise ValueError(
                f"prune_heads: no layer {layer!r} in {stack}; it has layers "
                f"0..{len(counts) - 1}{note}."
            )
        heads = set(heads)
        if not heads <= set(range(counts[layer])):
            raise ValueError(
                f"prune_heads: layer {layer} of {stack} has heads 0..{counts[layer] - 1}; "
                f"received {sorted(heads)}."
            )
        kept[layer] = [head for head in kept[layer] if head not in heads]
        if not kept[layer]:
            raise ValueError(
                f"prune_heads would remove every head of layer {layer} of {stack}; keep one."
            )
    return kept


def pruned_attention_values(attention, heads):
    """`{id(variable): NumPy value}` for an attention layer's weights keeping only `heads`.

    The heads' columns of each head projection (kernel and bias) and their
    rows of the output projection; nothing when every head is kept.

    >>> attention = kbert.layers.MultiHeadAttention(num_heads=3, key_dim=2)
    >>> attention.build((None, None, 4))
    >>> sorted(value.shape for value in pruned_attention_values(attention, [0, 2]).values())
    [(4,), (4,), (4,), (4, 4), (4, 4), (4, 4), (4, 4)]
    """
    if len(heads) == attention.num_heads:
        return {}
    values = {}
    for dense, width in attention.head_projections():
        columns = head_slices(heads, width)
        values[id(dense.kernel)] = keras.ops.convert_to_numpy(dense.kernel)[:, columns]
        if dense.use_bias:
            values[id(dense.bias)] = keras.ops.convert_to_numpy(dense.bias)[columns]
    output = attention.output_dense.kernel
    values[id(output)] = keras.ops.convert_to_numpy(output)[head_slices(heads, attention.value_dim)]
    return values


def head_slices(heads, width):
    """The indices of `heads`' features in a `(heads·width)` axis, in order.

    >>> head_slices([0, 2], 2).tolist()
    [0, 1, 4, 5]
    """
    return np.concatenate([np.arange(head * width, (head + 1) * width) for head in heads])

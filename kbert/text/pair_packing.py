"""`[CLS] A [SEP] B [SEP]` packing of one example into NumPy arrays, for the data builders
that assemble examples in Python (pretraining pairs, question-answering windows).

`SegmentPacker` does the same for whole batches inside `tf.data`; `pack` packs
one example whose segments already fit, with no TensorFlow, and `pack_rows`
cuts and packs a batch of id lists as `SegmentPacker`'s round-robin packing
does (the text-level calls' host path under JAX and PyTorch).
"""

import numpy as np


def pack(tokens_a, tokens_b, sequence_length, cls_id, sep_id, pad_id=0):
    """`[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]` when B is `None`), padded to `sequence_length`.

    Segment ids are 0 through the first `[SEP]` and 1 after it. The segments
    must already fit (`nsp_pairs`, `sop_pairs`, ... make sure of that).

    Returns:
        `(token_ids, segment_ids, padding_mask)`, int32 NumPy arrays of shape
        `(sequence_length,)`.

    >>> ids, segments, mask = pack([7, 8], [9], 8, cls_id=2, sep_id=3)
    >>> ids.tolist(), segments.tolist(), mask.tolist()
    ([2, 7, 8, 3, 9, 3, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0])
    """
    first = [cls_id, *tokens_a, sep_id]
    second = [] if tokens_b is None else [*tokens_b, sep_id]
    length = len(first) + len(second)
    if length > sequence_length:
        raise ValueError(
            f"The segments take {length} tokens with [CLS]/[SEP], more than "
            f"sequence_length={sequence_length}."
        )
    token_ids = np.full(sequence_length, pad_id, np.int32)
    token_ids[:length] = first + second
    segment_ids = np.zeros(sequence_length, np.int32)
    segment_ids[len(first) : length] = 1
    padding_mask = np.zeros(sequence_length, np.int32)
    padding_mask[:length] = 1
    return token_ids, segment_ids, padding_mask


def round_robin_lengths(first, second, budget):
    """How many tokens of segments of `first` and `second` tokens fit `budget`, cut as
    `SegmentPacker(truncate="round_robin")` cuts them: one token at a time from the longer
    segment, from the second when both are as long.

    >>> round_robin_lengths(5, 5, 5), round_robin_lengths(1, 9, 5), round_robin_lengths(9, 1, 5)
    ((3, 2), (1, 4), (4, 1))
    """
    kept_second = min(second, max(budget - first, budget // 2))
    return min(first, budget - kept_second), kept_second


def pack_rows(first, second, sequence_length, cls_id, sep_id, pad_id=0):
    """`SegmentPacker(sequence_length, cls_id, sep_id, pad_id)(first, second)` on lists of id lists:
    a dict of int32 NumPy arrays `token_ids`, `segment_ids`, `padding_mask` of shape
    `(len(first), sequence_length)`. `second` is `None` or as many id lists.

    >>> pack_rows([[7, 8, 9]], [[5, 6]], 6, cls_id=2, sep_id=3)["token_ids"].tolist()
    [[2, 7, 8, 3, 5, 3]]
    """
    budget = sequence_length - (2 if second is None else 3)
    rows = []
    for index, ids in enumerate(first):
        if second is None:
            rows.append(pack(ids[:budget], None, sequence_length, cls_id, sep_id, pad_id))
            continue
        kept_first, kept_second = round_robin_lengths(len(ids), len(second[index]), budget)
        rows.append(pack(ids[:kept_first], second[index][:kept_second], sequence_length, cls_id, sep_id, pad_id))
    names = ("token_ids", "segment_ids", "padding_mask")
    if not rows:
        return {name: np.zeros((0, sequence_length), np.int32) for name in names}
    return {name: np.stack(values) for name, values in zip(names, zip(*rows))}

"""`[CLS] A [SEP] B [SEP]` packing of one example into NumPy arrays, for the data builders
that assemble examples in Python (pretraining pairs, question-answering windows).

`SegmentPacker` does the same for whole batches inside `tf.data`; this function
packs one example whose segments already fit, with no TensorFlow.
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

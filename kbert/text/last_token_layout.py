"""XLNet's layout of packed rows: `A <sep> B <sep> <cls>`, padded on the left.

The packers write BERT's `[CLS] A [SEP] B [SEP]`, padded on the right. XLNet
reads its summary token last and pads on the left (transformers'
`XLNetTokenizer`: `padding_side="left"`, `<cls>` at the end with token type
2), so a batch packed for BERT is rearranged row by row: the first token (the
start token) moves to the last place, the rest keep their order, and the
padding moves in front.
"""

import numpy as np

from kbert.backend.imports import lazy_import

tf = lazy_import("tensorflow")

# The segment id XLNet's tokenizer gives `<cls>` (token type 2; A is 0, B is 1).
CLS_SEGMENT_ID = 2


def last_token_layout(batch):
    """`batch` (a dict of `(batch, length)` tensors packed for BERT) in XLNet's layout.

    Every rank-2 entry (the inputs, and per-token labels) is rearranged the
    same way; `segment_ids` gets `CLS_SEGMENT_ID` at the moved start token.
    Other entries (a label per row) are returned as they are. Rows must be
    right-padded (their `padding_mask` 1s first), as the packers write them.

    >>> packed = {"token_ids": np.array([[2, 7, 8, 3, 0, 0]]), "segment_ids": np.zeros((1, 6), int),
    ...           "padding_mask": np.array([[1, 1, 1, 1, 0, 0]]), "labels": np.array([1])}
    >>> moved = last_token_layout(packed)
    >>> moved["token_ids"].numpy().tolist(), moved["segment_ids"].numpy().tolist()
    ([[0, 0, 7, 8, 3, 2]], [[0, 0, 0, 0, 0, 2]])
    >>> moved["padding_mask"].numpy().tolist(), moved["labels"].tolist()
    ([[0, 0, 1, 1, 1, 1]], [1])
    """
    mask = tf.cast(batch["padding_mask"], tf.int32)
    length = tf.shape(mask)[1]
    real = tf.reduce_sum(mask, axis=1, keepdims=True)
    position = tf.range(length)[None, :]
    offset = position - (length - real)  # the place among the row's real tokens; < 0 in the padding
    last = tf.equal(offset, real - 1)
    source = tf.where(offset < 0, real + position, tf.where(last, 0, offset + 1))
    moved = {}
    for name, value in batch.items():
        if len(value.shape) != 2:
            moved[name] = value
            continue
        moved[name] = tf.gather(tf.convert_to_tensor(value), source, batch_dims=1)
    if "segment_ids" in moved:
        segments = moved["segment_ids"]
        moved["segment_ids"] = tf.where(last, tf.cast(CLS_SEGMENT_ID, segments.dtype), segments)
    return moved


def layout_for(backbone, arrays):
    """`arrays` (NumPy, packed for BERT) as `backbone` reads them: in `last_token_layout` for a
    backbone that summarises by its last token (`summary_token_index` -1, XLNet), with all `segment_ids`
    0 for one with one segment (RoBERTa, DistilBERT), else unchanged.

    >>> class LastTokenModel:
    ...     summary_token_index = -1
    >>> layout_for(LastTokenModel(), {"token_ids": np.array([[2, 7, 3, 0]]),
    ...                               "padding_mask": np.array([[1, 1, 1, 0]])})["token_ids"].tolist()
    [[0, 7, 3, 2]]
    """
    if getattr(backbone, "num_segments", 2) < 2 and "segment_ids" in arrays:  # RoBERTa: a pair is one segment
        arrays = {**arrays, "segment_ids": np.zeros_like(arrays["segment_ids"])}
    if getattr(backbone, "summary_token_index", 0) != -1:
        return arrays
    return {name: np.asarray(value) for name, value in last_token_layout(arrays).items()}

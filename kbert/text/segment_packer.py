"""Pack one or two segments of token ids into BERT's fixed-length model inputs.

Built on tensorflow-text's trimmers, `combine_segments` and `pad_model_inputs`,
so it runs inside `tf.data.Dataset.map` whatever the Keras backend.
`keras_hub.layers.MultiSegmentPacker` does the same packing but returns only
token and segment ids, leaving callers to derive the padding mask by comparing
ids with the pad id; this class returns kbert's input dict (`token_ids`,
`segment_ids`, `padding_mask`) with the mask taken from the true lengths, and
takes one or two segments as plain arguments.
"""

from kbert.arguments import one_of
from kbert.backend.imports import quiet_import

tf = quiet_import("tensorflow")
tf_text = quiet_import("tensorflow_text")

_TRIMMERS = {
    "round_robin": tf_text.RoundRobinTrimmer,
    "waterfall": tf_text.WaterfallTrimmer,
}


def _as_ragged_batch(segment, name):
    """`(ragged int32 batch, was_batched)` for a ragged batch, a 1-D or 2-D tensor, or a list."""
    if isinstance(segment, (list, tuple)):
        segment = tf.ragged.constant(segment, dtype=tf.int32)
    if not isinstance(segment, tf.RaggedTensor):
        segment = tf.convert_to_tensor(segment)
    if not segment.dtype.is_integer:
        raise ValueError(
            f"`{name}` must hold integer token ids. Received dtype {segment.dtype.name}."
        )
    rank = segment.shape.rank
    if rank not in (1, 2):
        raise ValueError(
            f"`{name}` must be one example of shape (length,) or a batch of shape "
            f"(batch, length). Received shape {segment.shape}."
        )
    segment = tf.cast(segment, tf.int32)
    if isinstance(segment, tf.RaggedTensor):
        return segment.with_row_splits_dtype(tf.int64), True
    if rank == 1:
        return tf.RaggedTensor.from_tensor(segment[None, :]), False
    return tf.RaggedTensor.from_tensor(segment), True


class SegmentPacker:
    """Lay out one or two segments as `[CLS] A [SEP] B [SEP]`, truncated and padded.

    Args:
        sequence_length: length of every output row (at least 3).
        start_id: id put first (`[CLS]`).
        end_id: id put after each segment (`[SEP]`).
        pad_id: id of the padding after the sequence.
        truncate: how a pair too long for `sequence_length` is cut, always at
            the end of a segment. `"round_robin"` removes one token at a time
            from the longer segment (the second when both are as long), as
            BERT's `_truncate_seq_pair` does. (Hugging Face's `longest_first`
            differs only when both segments are cut to an odd total: it gives
            the extra token to the second segment.) `"waterfall"` keeps the
            first segment whole as far as it fits and cuts the second one first.

    Call arguments:
        first: token ids of the first segments: a `tf.RaggedTensor` batch of
            shape `(batch, None)`, a dense `(batch, length)` tensor, or one
            example of shape `(length,)` (also a nested Python list).
        second: optional token ids of the second segments, batched like `first`.

    Returns:
        A dict of int32 tensors of static shape `(batch, sequence_length)`, or
        `(sequence_length,)` for one example: `token_ids`, `segment_ids` (0
        from `[CLS]` through the first `[SEP]`, then 1 through the second
        `[SEP]`, 0 on padding) and `padding_mask` (1 on real tokens).

    Example:

    >>> packer = SegmentPacker(8, start_id=2, end_id=3)
    >>> out = packer([10, 11, 12], [20, 21, 22, 23])
    >>> out["token_ids"].numpy().tolist()
    [2, 10, 11, 12, 3, 20, 21, 3]
    >>> out["segment_ids"].numpy().tolist()
    [0, 0, 0, 0, 0, 1, 1, 1]
    """

    def __init__(self, sequence_length, start_id, end_id, pad_id=0, truncate="round_robin"):
        if int(sequence_length) < 3:
            raise ValueError(
                "`sequence_length` must be at least 3 (room for [CLS] A [SEP] B [SEP] "
                f"with empty segments). Received: {sequence_length}."
            )
        self.sequence_length = int(sequence_length)
        self.start_id = int(start_id)
        self.end_id = int(end_id)
        self.pad_id = int(pad_id)
        self.truncate = one_of("truncate", truncate, _TRIMMERS)

    def __call__(self, first, second=None):
        segments, batched = zip(
            *[
                _as_ragged_batch(segment, name)
                for segment, name in ((first, "first"), (second, "second"))
                if segment is not None
            ]
        )
        if len(set(batched)) > 1:
            raise ValueError(
                "`first` and `second` must both be batches or both be single examples."
            )
        sizes = {s.shape[0] for s in segments if s.shape[0] is not None}
        if len(sizes) > 1:
            raise ValueError(f"`first` and `second` have different batch sizes: {sorted(sizes)}.")

        budget = self.sequence_length - len(segments) - 1
        trimmed = _TRIMMERS[self.truncate](budget).trim(list(segments))
        token_ids, segment_ids = tf_text.combine_segments(trimmed, self.start_id, self.end_id)
        token_ids, padding_mask = tf_text.pad_model_inputs(
            token_ids, self.sequence_length, pad_value=self.pad_id
        )
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, self.sequence_length, pad_value=0)
        outputs = {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": padding_mask,
        }
        shape = [-1, self.sequence_length] if batched[0] else [self.sequence_length]
        return {name: tf.reshape(tf.cast(x, tf.int32), shape) for name, x in outputs.items()}

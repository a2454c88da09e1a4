"""UTF-8 byte offsets to character offsets, as TensorFlow ops.

tensorflow-text's `tokenize_with_offsets` methods give byte offsets into the
UTF-8 encoding of the input; Python strings, SQuAD's `answer_start` and
Hugging Face's offset mappings count characters (code points). The
tokenizers' `tokenize_with_offsets` convert with `character_offsets`.
"""

from kbert.backend.imports import lazy_import

tf = lazy_import("tensorflow")


def character_offsets(strings, byte_offsets):
    """The character offsets of byte offsets into UTF-8 strings.

    Each byte offset is counted as the number of characters that start
    before it, so an offset on a character boundary becomes that character's
    index, and the byte length of a string becomes its length in characters.

    Args:
        strings: `tf.string` tensor of shape `(n,)`.
        byte_offsets: integer `tf.RaggedTensor` of shape `(n, None)`, offsets
            into the matching string (from 0 to its byte length).

    Returns:
        int32 `tf.RaggedTensor` with the shape of `byte_offsets`.

    Example:

    >>> import tensorflow as tf
    >>> byte_offsets = tf.ragged.constant([[0, 4, 6], [2]])
    >>> character_offsets(tf.constant(["naïve", "ok"]), byte_offsets).to_list()
    [[0, 3, 5], [2]]
    """
    _, char_starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8")
    # All strings laid end to end: their characters' starts and the offsets
    # become positions in one sorted sequence, searched at once.
    byte_base = tf.cumsum(tf.cast(tf.strings.length(strings), tf.int64), exclusive=True)
    starts = char_starts.flat_values + tf.gather(byte_base, char_starts.value_rowids())
    rows = byte_offsets.value_rowids()
    positions = tf.cast(byte_offsets.flat_values, tf.int64) + tf.gather(byte_base, rows)
    index = tf.searchsorted(starts, positions, side="left", out_type=tf.int64)
    index -= tf.gather(char_starts.row_starts(), rows)
    return byte_offsets.with_flat_values(tf.cast(index, tf.int32))

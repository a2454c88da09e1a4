"""character_offsets: UTF-8 byte offsets to character offsets, against Python's own encoding."""

import pytest

tf = pytest.importorskip("tensorflow")

from kbert.text.character_offsets import character_offsets  # noqa: E402

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

TEXTS = ["naïve café", "", "ascii only", "中文 and 😀 emoji", "Ω\u0301x"]


def python_character_offset(text, byte_offset):
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8"))


def test_every_character_boundary_matches_python():
    boundaries = [[len(text[:i].encode("utf-8")) for i in range(len(text) + 1)] for text in TEXTS]
    offsets = character_offsets(tf.constant(TEXTS), tf.ragged.constant(boundaries, tf.int64))
    assert offsets.dtype == tf.int32
    assert offsets.to_list() == [list(range(len(text) + 1)) for text in TEXTS]
    for text, row in zip(TEXTS, boundaries):
        assert [python_character_offset(text, b) for b in row] == list(range(len(text) + 1))


def test_empty_batches_and_rows():
    empty = character_offsets(tf.constant(["abc", "é"]), tf.ragged.constant([[], []], tf.int32))
    assert empty.to_list() == [[], []]
    no_rows = tf.RaggedTensor.from_row_splits(tf.constant([], tf.int32), tf.constant([0], tf.int64))
    none = character_offsets(tf.constant([], tf.string), no_rows)
    assert none.to_list() == []


def test_inside_tf_function():
    fn = tf.function(character_offsets)
    out = fn(tf.constant(["😀a", "b"]), tf.ragged.constant([[0, 4, 5], [1]]))
    assert out.to_list() == [[0, 1, 2], [1]]

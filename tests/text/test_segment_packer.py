"""SegmentPacker: BERT's [CLS] A [SEP] B [SEP] layout, truncation, static shapes, errors."""

import numpy as np
import pytest

pytest.importorskip("tensorflow_text")

import tensorflow as tf  # noqa: E402

from kbert.text import SegmentPacker, WordPieceTokenizer  # noqa: E402

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

CLS, SEP, PAD = 101, 102, 0


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Google BERT's `_truncate_seq_pair` (run_classifier.py): pop from the longer."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()
    return tokens_a, tokens_b


def waterfall(tokens_a, tokens_b, max_length):
    """Keep the first segment as far as it fits, then what room is left of the second."""
    tokens_a = list(tokens_a)[:max_length]
    return tokens_a, list(tokens_b)[: max_length - len(tokens_a)]


def layout(tokens_a, tokens_b, sequence_length):
    """Expected (token_ids, segment_ids, padding_mask) for already truncated segments."""
    ids = [CLS] + tokens_a + [SEP]
    segments = [0] * len(ids)
    if tokens_b is not None:
        ids += tokens_b + [SEP]
        segments += [1] * (len(tokens_b) + 1)
    padding = sequence_length - len(ids)
    return ids + [PAD] * padding, segments + [0] * padding, [1] * len(ids) + [0] * padding


def to_lists(outputs):
    return {name: x.numpy().tolist() for name, x in outputs.items()}


def test_single_example_layouts():
    packer = SegmentPacker(8, start_id=CLS, end_id=SEP)
    out = to_lists(packer(tf.constant([5, 6, 7])))
    assert out == {
        "token_ids": [CLS, 5, 6, 7, SEP, 0, 0, 0],
        "segment_ids": [0, 0, 0, 0, 0, 0, 0, 0],
        "padding_mask": [1, 1, 1, 1, 1, 0, 0, 0],
    }
    out = to_lists(packer([5, 6, 7], [8, 9]))
    assert out == {
        "token_ids": [CLS, 5, 6, 7, SEP, 8, 9, SEP],
        "segment_ids": [0, 0, 0, 0, 0, 1, 1, 1],
        "padding_mask": [1, 1, 1, 1, 1, 1, 1, 1],
    }
    out = to_lists(packer(list(range(20, 40))))
    assert out["token_ids"] == [CLS, 20, 21, 22, 23, 24, 25, SEP]
    assert out["padding_mask"] == [1] * 8


def test_batches_and_empty_segments():
    packer = SegmentPacker(7, start_id=CLS, end_id=SEP)
    first = tf.ragged.constant([[5, 6], [], [7]])
    second = tf.ragged.constant([[8], [9, 10], []])
    out = to_lists(packer(first, second))
    assert out["token_ids"] == [
        [CLS, 5, 6, SEP, 8, SEP, 0],
        [CLS, SEP, 9, 10, SEP, 0, 0],
        [CLS, 7, SEP, SEP, 0, 0, 0],
    ]
    assert out["segment_ids"] == [
        [0, 0, 0, 0, 1, 1, 0],
        [0, 0, 1, 1, 1, 0, 0],
        [0, 0, 0, 1, 0, 0, 0],
    ]
    assert out["padding_mask"] == [
        [1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
    ]
    # Dense (batch, length) tensors are batches of full rows.
    dense = to_lists(packer(tf.constant([[5, 6], [7, 8]], tf.int64)))
    assert dense["token_ids"] == [[CLS, 5, 6, SEP, 0, 0, 0], [CLS, 7, 8, SEP, 0, 0, 0]]


@pytest.mark.parametrize(
    "truncate,reference", [("round_robin", truncate_seq_pair), ("waterfall", waterfall)]
)
def test_truncation_matches_reference(truncate, reference):
    sequence_length = 10
    budget = sequence_length - 3
    pairs = [(a, b) for a in range(13) for b in range(13)]
    firsts = [list(range(100, 100 + a)) for a, _ in pairs]
    seconds = [list(range(200, 200 + b)) for _, b in pairs]
    packer = SegmentPacker(sequence_length, start_id=CLS, end_id=SEP, truncate=truncate)
    out = to_lists(packer(tf.ragged.constant(firsts), tf.ragged.constant(seconds, dtype=tf.int32)))
    for i, (first, second) in enumerate(zip(firsts, seconds)):
        expected = layout(*reference(first, second, budget), sequence_length)
        actual = (out["token_ids"][i], out["segment_ids"][i], out["padding_mask"][i])
        assert actual == expected, (len(first), len(second))

    single = to_lists(packer(tf.ragged.constant(firsts)))
    for i, first in enumerate(firsts):
        expected = layout(first[: sequence_length - 2], None, sequence_length)
        assert single["token_ids"][i] == expected[0]


def test_pad_id_and_mask_from_lengths():
    packer = SegmentPacker(6, start_id=2, end_id=3, pad_id=7)
    out = to_lists(packer([7, 0]))
    # A real token equal to the pad id is still a real token.
    assert out == {
        "token_ids": [2, 7, 0, 3, 7, 7],
        "segment_ids": [0, 0, 0, 0, 0, 0],
        "padding_mask": [1, 1, 1, 1, 0, 0],
    }


def test_static_shapes_in_dataset_map():
    tokenizer = WordPieceTokenizer(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", "."]
    )
    packer = SegmentPacker(8, start_id=tokenizer.cls_id, end_id=tokenizer.sep_id)
    pairs = (["The cat sat.", "Cats"], ["The cats.", "sat sat sat sat sat sat"])

    def pack(first, second):
        return packer(tokenizer.tokenize(first), tokenizer.tokenize(second))

    dataset = tf.data.Dataset.from_tensor_slices(pairs).map(pack)
    for name in ("token_ids", "segment_ids", "padding_mask"):
        assert dataset.element_spec[name].shape.as_list() == [8]
        assert dataset.element_spec[name].dtype == tf.int32
    rows = list(dataset.as_numpy_iterator())
    # round robin: 5 tokens of budget, "the cat sat ." (4) vs "the cat ##s ." (4) -> 3 + 2.
    assert rows[0]["token_ids"].tolist() == [2, 5, 6, 7, 3, 5, 6, 3]
    assert rows[1]["token_ids"].tolist() == [2, 6, 8, 3, 7, 7, 7, 3]
    batch = packer(tokenizer.tokenize(pairs[0]), tokenizer.tokenize(pairs[1]))
    np.testing.assert_array_equal(np.stack([r["token_ids"] for r in rows]), batch["token_ids"])

    traced = tf.function(
        packer, input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)]
    ).get_concrete_function()
    assert traced.structured_outputs["token_ids"].shape.as_list() == [None, 8]


def test_bad_input():
    with pytest.raises(ValueError, match="sequence_length"):
        SegmentPacker(2, start_id=CLS, end_id=SEP)
    with pytest.raises(ValueError, match="truncate"):
        SegmentPacker(8, start_id=CLS, end_id=SEP, truncate="longest_first")
    packer = SegmentPacker(8, start_id=CLS, end_id=SEP)
    with pytest.raises(ValueError, match="integer"):
        packer(tf.constant(["a", "b"]))
    with pytest.raises(ValueError, match="shape"):
        packer(tf.zeros((2, 2, 2), tf.int32))
    with pytest.raises(ValueError, match="shape"):
        packer(tf.constant(5))
    with pytest.raises(ValueError, match="both be batches"):
        packer(tf.ragged.constant([[1, 2]]), tf.constant([3]))
    with pytest.raises(ValueError, match="batch sizes"):
        packer(tf.ragged.constant([[1], [2]]), tf.ragged.constant([[3]]))

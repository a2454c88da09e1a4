"""HostWordPiece and `pack_rows` (the text-level calls' host path under JAX and PyTorch) against
`WordPieceTokenizer.tokenize` and `SegmentPacker` (the TensorFlow path): the same ids and rows.

The TensorFlow path is checked against Hugging Face's `BertTokenizerFast` in
test_word_piece_tokenizer.py, on the same texts.
"""

import itertools
import unicodedata

import numpy as np
import pytest
from test_word_piece_tokenizer import HAND_TEXTS, HAND_VOCABULARY, TEXTS

pytest.importorskip("tensorflow_text")
pytest.importorskip("tokenizers")

import tensorflow as tf  # noqa: E402

from kbert.text import SegmentPacker, WordPieceTokenizer  # noqa: E402
from kbert.text.host_word_piece import HostWordPiece  # noqa: E402
from kbert.text.pair_packing import pack_rows, round_robin_lengths  # noqa: E402

# Both paths are computed on the host whatever the backend: one run.
pytestmark = pytest.mark.backend_independent

SPECIAL_TEXTS = ["The [MASK] sat on [CLS]the mat[SEP] [PAD]x[UNK]y", "a[MASK]b [[MASK]] [mask] [MASK [MA\x00SK]",
                 "[SEP][SEP]", "[MASK]"]
ALL_TEXTS = TEXTS + HAND_TEXTS + SPECIAL_TEXTS + ["a" * 100 + " " + "a" * 101, "x", ""]


def _vocabulary():
    """The hand vocabulary, with every character of the texts as a word and as a `##` piece (both cases)."""
    characters = sorted({c for text in ALL_TEXTS for c in text + text.lower()
                         if not c.isspace() and not unicodedata.category(c).startswith("C")})
    return list(dict.fromkeys([*HAND_VOCABULARY, *characters, *(f"##{c}" for c in characters)]))


VOCABULARY = _vocabulary()


def _tf_ids(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()


@pytest.mark.parametrize("lowercase,strip_accents,split_on_cjk",
                         [(True, None, True), (False, None, True), (True, False, False), (False, True, True)])
def test_host_ids_equal_the_tensorflow_ids(lowercase, strip_accents, split_on_cjk):
    tokenizer = WordPieceTokenizer(VOCABULARY, lowercase=lowercase, strip_accents=strip_accents,
                                   split_on_cjk=split_on_cjk)
    host = HostWordPiece(tokenizer)
    for text, mine, theirs in zip(ALL_TEXTS, host(ALL_TEXTS), _tf_ids(tokenizer, ALL_TEXTS)):
        assert mine == theirs, text
    assert tokenizer.mask_id in host(["the [MASK] sat"])[0]


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_host_offsets_equal_the_tensorflow_offsets(lowercase):
    tokenizer = WordPieceTokenizer(VOCABULARY, lowercase=lowercase)
    mine = HostWordPiece(tokenizer).tokenize_with_offsets(ALL_TEXTS)
    theirs = [ragged.to_list() for ragged in tokenizer.tokenize_with_offsets(tf.constant(ALL_TEXTS))]
    for name, a, b in zip(("ids", "starts", "ends"), mine, theirs):
        for text, row_a, row_b in zip(ALL_TEXTS, a, b):
            assert row_a == row_b, (name, text)


def test_host_ids_with_a_short_word_limit_and_another_unknown_token():
    vocabulary = [token if token != "[UNK]" else "<unk>" for token in VOCABULARY]
    tokenizer = WordPieceTokenizer(vocabulary, max_chars_per_word=5, unknown_token="<unk>")
    texts = ["aaaa aaaaa aaaaaa éééé ééééé éééééé", "a <unk> [MASK] b", "<UNK> [UNK]"]
    assert HostWordPiece(tokenizer)(texts) == _tf_ids(tokenizer, texts)


def test_round_robin_lengths_equal_the_trimmer():
    import tensorflow_text as tf_text

    cases = list(itertools.product(range(6), range(6), range(7)))
    first = tf.ragged.constant([[1] * a for a, _, _ in cases], tf.int32)
    second = tf.ragged.constant([[1] * b for _, b, _ in cases], tf.int32)
    for budget in range(7):
        kept = tf_text.RoundRobinTrimmer(budget).trim([first, second])
        lengths = np.stack([k.row_lengths().numpy() for k in kept], axis=1)
        expected = [round_robin_lengths(a, b, budget) for a, b, _ in cases]
        np.testing.assert_array_equal(lengths, expected)


@pytest.mark.parametrize("sequence_length", [3, 8, 16, 64])
def test_host_rows_equal_the_segment_packer(sequence_length):
    tokenizer = WordPieceTokenizer(VOCABULARY)
    host = HostWordPiece(tokenizer)
    texts = ALL_TEXTS
    pairs = ALL_TEXTS[::-1]  # long with short, empty with long, ...
    packer = SegmentPacker(sequence_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    special = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)
    for second in (None, pairs):
        mine = pack_rows(host(texts), None if second is None else host(second), sequence_length, **special)
        theirs = packer(tokenizer.tokenize(tf.constant(texts)),
                        None if second is None else tokenizer.tokenize(tf.constant(second)))
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            assert mine[name].dtype == np.int32
            np.testing.assert_array_equal(mine[name], value.numpy(), err_msg=name)
    assert pack_rows([], None, sequence_length, **special)["token_ids"].shape == (0, sequence_length)

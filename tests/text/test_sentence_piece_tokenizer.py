"""SentencePieceTokenizer and train_sentence_piece, checked against the `sentencepiece` package."""

import numpy as np
import pytest

from kbert.text import SentencePieceTokenizer, train_sentence_piece

tf = pytest.importorskip("tensorflow")
sentencepiece = pytest.importorskip("sentencepiece")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Return the value of the named attribute of an object.",
    "A list is a mutable sequence; a tuple is an immutable one.",
    "Strings are sequences of Unicode code points.",
    "The interpreter reads the module and executes its statements.",
] * 20


@pytest.fixture(scope="module")
def model_bytes():
    return train_sentence_piece(SENTENCES, vocabulary_size=120)


def test_trained_model_has_t5_special_ids(model_bytes, tmp_path):
    path = tmp_path / "spiece.model"
    path.write_bytes(model_bytes)
    tokenizer = SentencePieceTokenizer(path)
    assert (tokenizer.pad_id, tokenizer.end_id, tokenizer.unknown_id) == (0, 1, 2)
    # hard_vocab_limit=False: a corpus this small yields fewer pieces than asked.
    assert 10 < tokenizer.vocabulary_size <= 120


def test_ids_match_the_sentencepiece_package(model_bytes):
    reference = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    tokenizer = SentencePieceTokenizer(model_bytes, add_end=True)
    texts = ["The lazy fox reads a tuple.", "Unicode sequences."]
    ids = tokenizer.tokenize(texts).to_list()
    assert ids == [reference.encode(t) + [1] for t in texts]
    assert tokenizer.detokenize(tokenizer.tokenize(texts)).numpy().tolist() == [
        t.encode() for t in texts
    ]
    assert tokenizer.id_to_piece([1]).numpy().tolist() == [b"</s>"]


def test_tokenizes_inside_tf_data(model_bytes):
    tokenizer = SentencePieceTokenizer(model_bytes)
    dataset = tf.data.Dataset.from_tensor_slices(SENTENCES[:4]).map(tokenizer.tokenize)
    lengths = [len(ids) for ids in dataset.as_numpy_iterator()]
    assert all(n > 3 for n in lengths)


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        SentencePieceTokenizer(tmp_path / "missing.model")
    with pytest.raises(ValueError, match="at least 4"):
        train_sentence_piece(SENTENCES, vocabulary_size=2)

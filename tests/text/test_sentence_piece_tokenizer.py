"""SentencePieceTokenizer and train_sentence_piece, checked against the `sentencepiece` package."""

import pytest

from kbert.text import SentencePieceTokenizer, train_sentence_piece

tf = pytest.importorskip("tensorflow")
sentencepiece = pytest.importorskip("sentencepiece")

pytestmark = pytest.mark.backend_independent  # TensorFlow tokenizers whatever the backend: one run

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


def reference_spans(processor, text):
    """Character spans from the `sentencepiece` package's own byte alignment, with
    the white space a piece's "▁" stands for left out."""
    data = text.encode("utf-8")
    spans = []
    for piece in processor.encode(text, return_type="proto").pieces:
        start = len(data[: piece.begin].decode("utf-8"))
        end = len(data[: piece.end].decode("utf-8"))
        while start < end and text[start].isspace():
            start += 1
        spans.append((start, end))
    return spans


OFFSET_TEXTS = [
    "The lazy fox reads a tuple.",
    "  Leading  and   inner spaces ",
    "Café naïve Ω ﬁne ① ＡＢ\tTabs\u3000wide\u00a0nbsp",
    "",
]


@pytest.mark.parametrize("add_end", [False, True])
def test_offsets_match_the_sentencepiece_package(model_bytes, add_end):
    reference = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    tokenizer = SentencePieceTokenizer(model_bytes, add_end=add_end)
    ids, starts, ends = tokenizer.tokenize_with_offsets(OFFSET_TEXTS)
    assert ids.to_list() == tokenizer.tokenize(OFFSET_TEXTS).to_list()
    for text, start, end in zip(OFFSET_TEXTS, starts.to_list(), ends.to_list()):
        expected = reference_spans(reference, text)
        if add_end:  # the end token: an empty span at the end of the text
            expected.append((len(text), len(text)))
        assert list(zip(start, end)) == expected, text


def test_offsets_hand_worked(model_bytes):
    tokenizer = SentencePieceTokenizer(model_bytes)
    text = "The  lazy Ω."
    ids, starts, ends = tokenizer.tokenize_with_offsets(text)
    pieces = [p.decode() for p in tokenizer.id_to_piece(ids).numpy()]
    spans = [text[s:e] for s, e in zip(starts.numpy(), ends.numpy())]
    # Each piece spans its own characters; "▁" stands for the spaces before it.
    assert [p.replace("▁", "") for p in pieces if p != "<unk>"] == [
        s for p, s in zip(pieces, spans) if p != "<unk>"
    ]
    assert spans[pieces.index("<unk>")] == "Ω"
    assert "".join(spans) == "ThelazyΩ."


def test_special_pieces(tmp_path):
    with_specials = train_sentence_piece(SENTENCES, 120, control_symbols=("[CLS]", "[SEP]"))
    tokenizer = SentencePieceTokenizer(with_specials)
    assert (tokenizer.cls_id, tokenizer.sep_id) == (3, 4)
    assert tokenizer.id_to_piece([3, 4]).numpy().tolist() == [b"[CLS]", b"[SEP]"]
    # Control symbols are never produced from text.
    assert 3 not in tokenizer.tokenize("[CLS] The fox [SEP]").numpy().tolist()
    t5_like = SentencePieceTokenizer(train_sentence_piece(SENTENCES, 120))
    assert (t5_like.cls_id, t5_like.sep_id) == (None, None)


def test_sentinels_sit_at_the_top_as_t5_s(model_bytes):
    plain = SentencePieceTokenizer(model_bytes)
    with_sentinels = train_sentence_piece(SENTENCES, vocabulary_size=120, sentinels=3)
    tokenizer = SentencePieceTokenizer(with_sentinels)
    top = tokenizer.vocabulary_size - 1
    assert tokenizer.vocabulary_size == plain.vocabulary_size + 3
    assert tokenizer.id_to_piece([top, top - 2]).numpy().tolist() == [b"<extra_id_0>", b"<extra_id_2>"]
    # Text that spells a sentinel out is that id, as the sentencepiece package reads the same model.
    reference = sentencepiece.SentencePieceProcessor(model_proto=with_sentinels)
    text = "The fox <extra_id_1> the dog."
    assert tokenizer.tokenize(text).numpy().tolist() == reference.encode(text)
    assert top - 1 in reference.encode(text)
    assert tokenizer.detokenize([[top, 5, top - 1]]).numpy()[0] == reference.decode([top, 5, top - 1]).encode()
    assert b"<extra_id_0>" in tokenizer.detokenize([[top, 5]]).numpy()[0]


def test_offsets_bad_input(model_bytes):
    tokenizer = SentencePieceTokenizer(model_bytes)
    with pytest.raises(ValueError, match="1-D batch of strings"):
        tokenizer.tokenize_with_offsets(tf.constant([["a"]]))
    with pytest.raises(ValueError, match="1-D batch of strings"):
        tokenizer.tokenize_with_offsets(tf.constant([1]))


def test_a_tokenizer_outlives_keras_seeding(model_bytes):
    # tf.random.set_seed clears TensorFlow's kernel caches, and the model of any op kept from before.
    import keras

    tokenizer = SentencePieceTokenizer(model_bytes)
    before = tokenizer.tokenize(["The quick brown fox."]).to_list()
    keras.utils.set_random_seed(0)
    assert tokenizer.tokenize(["The quick brown fox."]).to_list() == before
    assert tokenizer.detokenize(before).numpy().tolist() == [b"The quick brown fox."]

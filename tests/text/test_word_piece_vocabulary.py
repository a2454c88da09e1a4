"""learn_word_piece_vocabulary: layout, coverage of every character, inputs, errors."""

import pytest

pytest.importorskip("tensorflow_text")
topics = pytest.importorskip("pydoc_data.topics").topics

import tensorflow as tf  # noqa: E402

from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary  # noqa: E402

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CORPUS = list(topics.values())[:20] + [
    "Ångström, naïve café; Straße ΟΔΟΣ Привет 中文 😀 " + "x" * 80 + "q" * 120,
    "The [MASK] token is reserved.",
]


@pytest.fixture(scope="module")
def vocabulary():
    return learn_word_piece_vocabulary(CORPUS, 1000)


def test_layout(vocabulary):
    assert vocabulary[:5] == SPECIALS
    assert len(vocabulary) <= 1000
    assert len(set(vocabulary)) == len(vocabulary)
    assert all(token and not token.isspace() for token in vocabulary)
    # Learned pieces: whole words and continuations of several characters.
    assert {"the", "function"} <= set(vocabulary)
    assert any(t.startswith("##") and len(t) > 4 for t in vocabulary)


def test_every_character_is_covered(vocabulary):
    """Every character seen, as a word start and a continuation: no [UNK] on the corpus,
    even for the characters of words too long for the learner (the 120 q's)."""
    tokenizer = WordPieceTokenizer(vocabulary)
    words = tokenizer.split_words(tf.constant(CORPUS)).flat_values.numpy()
    characters = {c for word in words for c in word.decode()} - set("[]MASK")
    assert {"q", "##q", "x", "##x", "中", "##中", "😀", "ß", "##ß", "ο", "##σ"} <= set(vocabulary)
    for character in characters:
        assert character in vocabulary and "##" + character in vocabulary, character
    ids = tokenizer(CORPUS[:-2] + CORPUS[-1:])
    assert all(tokenizer.unknown_id not in row for row in ids)
    # Words over max_chars_per_word (100) are the only [UNK].
    assert tokenizer(CORPUS[-2]).count(tokenizer.unknown_id) == 1
    # Uncased: no upper-case letters or accents learned (the [MASK] in the text is not learned).
    assert not any(c.isupper() for t in vocabulary[5:] for c in t)
    assert "é" not in vocabulary and "e" in vocabulary


def test_cased():
    vocabulary = learn_word_piece_vocabulary(CORPUS[-2:] * 5, 200, lowercase=False)
    assert {"Å", "##Å", "é", "Σ", "##Σ"} <= set(vocabulary)
    tokenizer = WordPieceTokenizer(vocabulary, lowercase=False)
    assert tokenizer.unknown_id not in tokenizer("Ångström naïve café")


def test_size_is_respected():
    vocabulary = learn_word_piece_vocabulary(CORPUS[:5], 300)
    assert 0.9 * 300 <= len(vocabulary) <= 300


def test_datasets_and_generators_give_the_same_vocabulary():
    corpus = CORPUS[:3]
    expected = learn_word_piece_vocabulary(corpus, 300)
    dataset = tf.data.Dataset.from_tensor_slices(corpus)
    assert learn_word_piece_vocabulary(dataset, 300) == expected
    assert learn_word_piece_vocabulary(dataset.batch(2), 300) == expected
    assert learn_word_piece_vocabulary((text for text in corpus), 300) == expected


def test_custom_reserved_tokens():
    reserved = SPECIALS + ["[unused0]", "[unused1]"]
    vocabulary = learn_word_piece_vocabulary(CORPUS[:3], 300, reserved_tokens=reserved)
    assert vocabulary[:7] == reserved


def test_bad_input():
    empty_dataset = tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    for empty in ([], ["", "  \n\t"], ["[MASK] [SEP]"], empty_dataset):
        with pytest.raises(ValueError, match="corpus is empty"):
            learn_word_piece_vocabulary(empty, 100)
    with pytest.raises(ValueError, match="too small"):
        learn_word_piece_vocabulary(CORPUS[:2], 50)
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        learn_word_piece_vocabulary(CORPUS, 1000, reserved_tokens=SPECIALS[:4])
    with pytest.raises(ValueError, match="duplicates"):
        learn_word_piece_vocabulary(CORPUS, 1000, reserved_tokens=SPECIALS + ["[PAD]"])
    with pytest.raises(ValueError, match="not one string"):
        learn_word_piece_vocabulary("just one text", 1000)
    with pytest.raises(ValueError, match="strings"):
        learn_word_piece_vocabulary(tf.data.Dataset.range(3), 1000)
    with pytest.raises(ValueError, match="strings"):
        learn_word_piece_vocabulary(["a", 3], 1000)

"""The biLM data: sentences wrapped in <S> and </S>, windows, word and character ids, seeds."""

import numpy as np
import pytest

from kbert.pretraining import bilm_dataset, learn_word_vocabulary
from kbert.text import character_ids

DOCUMENTS = ["The cat sat.\nThe dog ran far away.", "A bird sang.\nThe cat ran."]


def _batches(dataset):
    return [({k: v.numpy() for k, v in x.items()}, y["token_ids"].numpy()) for x, y in dataset]


def test_vocabulary_is_special_words_then_frequency():
    vocabulary = learn_word_vocabulary(DOCUMENTS, 7)
    assert vocabulary == ["[PAD]", "[UNK]", "<S>", "</S>", ".", "The", "cat"]
    with pytest.raises(ValueError, match="vocabulary_size must exceed the 4 special words"):
        learn_word_vocabulary(DOCUMENTS, 4)


def test_windows_hold_every_word_once_with_their_character_ids():
    vocabulary = learn_word_vocabulary(DOCUMENTS, 100)
    batches = _batches(bilm_dataset(DOCUMENTS, vocabulary, sequence_length=5, batch_size=1,
                                    shuffle_buffer=1, repeat=False, seed=0))
    words = [vocabulary[i] for x, ids in batches for i, m in zip(ids[0], x["padding_mask"][0]) if m]
    expected = ("<S> The cat sat . </S> <S> The dog ran far away . </S> "
                "<S> A bird sang . </S> <S> The cat ran . </S>").split()
    assert words == expected
    x, ids = batches[0]
    assert ids[0].tolist() == [vocabulary.index(w) for w in expected[:5]]
    np.testing.assert_array_equal(x["character_ids"][0], character_ids(expected[:5]))
    last, _ = batches[-1]  # the second document's last window: ". </S>" and padding
    assert last["padding_mask"][0].tolist() == [1, 1, 0, 0, 0] and not last["character_ids"][0, 2:].any()


def test_unknown_words_get_the_unknown_id_and_the_seed_fixes_the_order():
    vocabulary = learn_word_vocabulary(DOCUMENTS, 6)
    options = dict(sequence_length=4, batch_size=2, shuffle_buffer=8, repeat=False)
    first = _batches(bilm_dataset(DOCUMENTS, vocabulary, seed=3, **options))
    again = _batches(bilm_dataset(DOCUMENTS, vocabulary, seed=3, **options))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(first, again)) and len(first) == len(again)
    ids = np.concatenate([b[1] for b in first])
    assert 1 in ids and ids.max() < 6


def test_bad_arguments_are_named(tmp_path):
    vocabulary = learn_word_vocabulary(DOCUMENTS, 10)
    with pytest.raises(ValueError, match="sequence_length must be at least 2"):
        bilm_dataset(DOCUMENTS, vocabulary, sequence_length=1)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="The corpus is empty"):
        bilm_dataset(str(tmp_path / "empty.txt"), vocabulary)

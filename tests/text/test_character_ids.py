"""ELMo's character ids against AllenNLP's ELMoCharacterMapper conventions, written out by hand."""

import numpy as np
import pytest

from kbert.text import character_ids, split_words, word_character_ids

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

# ELMoCharacterMapper: bos/eos sentence 256/257, begin/end of word 258/259, padding 260, then +1.
BOW, EOW, PAD = 259, 260, 261


def test_a_word_is_its_utf8_bytes_plus_one_between_the_word_marks():
    ids = word_character_ids("Héllo")
    expected = [BOW, ord("H") + 1, 0xC3 + 1, 0xA9 + 1, *(ord(c) + 1 for c in "llo"), EOW] + [PAD] * 42
    assert ids == expected and len(ids) == 50


def test_sentence_marks_and_long_words():
    assert word_character_ids("<S>")[:4] == [BOW, 257, EOW, PAD]
    assert word_character_ids("</S>")[:4] == [BOW, 258, EOW, PAD]
    long = word_character_ids("x" * 60)  # cut to 48 bytes
    assert long == [BOW] + [ord("x") + 1] * 48 + [EOW]


def test_padding_tokens_are_zeros_and_ids_stay_below_262():
    ids = character_ids(split_words("A tiny, tidy test."), length=8)
    assert ids.shape == (8, 50) and ids.dtype == np.int32
    assert not ids[6:].any() and (ids[:6] > 0).all() and ids.max() < 262


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="3 words do not fit in a length of 2"):
        character_ids(["a", "b", "c"], length=2)
    with pytest.raises(ValueError, match="max_characters must be at least 3"):
        word_character_ids("a", max_characters=2)

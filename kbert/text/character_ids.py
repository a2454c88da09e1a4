"""Words to ELMo's character ids, with AllenNLP's `ELMoCharacterMapper` conventions.

A word's UTF-8 bytes (at most `max_characters − 2`) sit between a
begin-of-word and an end-of-word id, padded with the padding-character id;
the sentence markers `<S>` and `</S>` are the begin-of-word id, their own id
(256, 257) and the end-of-word id. Every id is then shifted by 1, so that 0
is left for padding tokens (a token of all zeros): 262 ids in all, as
`kbert.models.ELMo` expects. Plain Python and NumPy, no TensorFlow.
"""

import re

import numpy as np

MAX_CHARACTERS = 50
NUM_CHARACTER_IDS = 262
BEGINNING_OF_SENTENCE = "<S>"
END_OF_SENTENCE = "</S>"
_SENTENCE_MARKS = {BEGINNING_OF_SENTENCE: 256, END_OF_SENTENCE: 257}
_BEGINNING_OF_WORD, _END_OF_WORD, _PADDING = 258, 259, 260
_WORDS = re.compile(r"\w+|[^\w\s]")


def split_words(text):
    """The words and punctuation marks of `text`, in order.

    >>> split_words("Hello, ELMo's world!")
    ['Hello', ',', 'ELMo', "'", 's', 'world', '!']
    """
    return _WORDS.findall(text)


def word_character_ids(word, max_characters=MAX_CHARACTERS):
    """One word's `max_characters` character ids (AllenNLP's `convert_word_to_char_ids`).

    >>> word_character_ids("hi", max_characters=6)
    [259, 105, 106, 260, 261, 261]
    >>> word_character_ids("<S>", max_characters=6)
    [259, 257, 260, 261, 261, 261]
    """
    if max_characters < 3:
        raise ValueError(f"max_characters must be at least 3 (begin, one byte, end); received {max_characters}.")
    ids = [_PADDING] * max_characters
    if word in _SENTENCE_MARKS:
        ids[:3] = [_BEGINNING_OF_WORD, _SENTENCE_MARKS[word], _END_OF_WORD]
    else:
        encoded = word.encode("utf-8", "ignore")[: max_characters - 2]
        ids[0] = _BEGINNING_OF_WORD
        ids[1 : len(encoded) + 1] = list(encoded)
        ids[len(encoded) + 1] = _END_OF_WORD
    return [i + 1 for i in ids]


def character_ids(words, length=None, max_characters=MAX_CHARACTERS):
    """int32 `(length, max_characters)`: the words' character ids, then padding tokens of zeros.

    `length` defaults to the number of words; more words than `length` is a
    `ValueError`.

    >>> character_ids(["<S>", "a"], length=3, max_characters=5).tolist()
    [[259, 257, 260, 261, 261], [259, 98, 260, 261, 261], [0, 0, 0, 0, 0]]
    """
    words = list(words)
    length = len(words) if length is None else length
    if len(words) > length:
        raise ValueError(f"{len(words)} words do not fit in a length of {length}.")
    ids = np.zeros((length, max_characters), np.int32)
    for index, word in enumerate(words):
        ids[index] = word_character_ids(word, max_characters)
    return ids

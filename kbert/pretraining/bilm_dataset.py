"""Raw text to biLM batches (ELMo): each token's character ids in, its word id as the target.

The stages: `read_documents` streams documents; each sentence is split into
words (`kbert.text.split_words`) and wrapped in `<S>` and `</S>`; a
document's words are cut into windows of `sequence_length`; the windows go
through a seeded shuffle buffer; each becomes character ids
(`kbert.text.character_ids`) and word ids of a vocabulary from
`learn_word_vocabulary`. Like `pretraining_dataset`, it streams, and all its
randomness comes from `seed` (the shuffle order changes every pass).
"""

import collections
import itertools
import random

import numpy as np

from kbert.backend.imports import lazy_import, traced_as_written
from kbert.pretraining.pretraining_dataset import _documents, _shuffled, _stream_seeds, corpus_sources

tf = lazy_import("tensorflow")
text = lazy_import("kbert.text")

PAD_WORD, UNKNOWN_WORD = "[PAD]", "[UNK]"
PAD_ID, UNKNOWN_ID = 0, 1
MIN_SEQUENCE_LENGTH = 2


def sentence_words(document):
    """A document's words (a list of sentences), each sentence wrapped in `<S>` and `</S>`.

    >>> sentence_words(["Hello, world.", "Bye"])
    ['<S>', 'Hello', ',', 'world', '.', '</S>', '<S>', 'Bye', '</S>']
    """
    words = []
    for sentence in document:
        words.extend(["<S>", *text.split_words(sentence), "</S>"])
    return words


def learn_word_vocabulary(inputs, vocabulary_size):
    """`[PAD]`, `[UNK]`, `<S>`, `</S>`, then the most frequent words of the corpus (ties: alphabetical).

    `inputs` is what `read_documents` takes; at most `vocabulary_size` words in all.

    >>> learn_word_vocabulary(["b a b.", "c b a"], 6)
    ['[PAD]', '[UNK]', '<S>', '</S>', 'b', 'a']
    """
    special = [PAD_WORD, UNKNOWN_WORD, "<S>", "</S>"]
    if vocabulary_size <= len(special):
        raise ValueError(f"vocabulary_size must exceed the {len(special)} special words; received {vocabulary_size}.")
    counts = collections.Counter()
    for document in _documents(corpus_sources(inputs)):
        counts.update(word for sentence in document for word in text.split_words(sentence))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return special + [word for word, _ in ranked[: vocabulary_size - len(special)]]


class _Windows:
    """The Python side: shuffled windows of words, as arrays; called once per pass."""

    def __init__(self, inputs, vocabulary, sequence_length, shuffle_buffer, seed):
        self.sources = corpus_sources(inputs)
        if next(_documents(self.sources), None) is None:
            raise ValueError("The corpus is empty: no text in the given files, folders or strings.")
        self.word_ids = {word: index for index, word in enumerate(vocabulary)}
        self.sequence_length = sequence_length
        self.shuffle_buffer = shuffle_buffer
        self.shuffle_seed = _stream_seeds(seed)[1]
        self.passes = itertools.count()

    def windows(self):
        length = self.sequence_length
        for document in _documents(self.sources):
            words = sentence_words(document)
            for start in range(0, len(words) - 1, length):  # a window of one word predicts nothing
                yield words[start : start + length]

    def __call__(self):
        rng = random.Random(f"{self.shuffle_seed}/{next(self.passes)}")
        for words in _shuffled(self.windows(), self.shuffle_buffer, rng):
            ids = np.full(self.sequence_length, PAD_ID, np.int32)
            ids[: len(words)] = [self.word_ids.get(word, UNKNOWN_ID) for word in words]
            yield {
                "character_ids": text.character_ids(words, self.sequence_length),
                "padding_mask": (np.arange(self.sequence_length) < len(words)).astype(np.int32),
                "token_ids": ids,
            }


def bilm_dataset(inputs, vocabulary, sequence_length=20, batch_size=32, shuffle_buffer=10_000,
                 seed=None, repeat=True):
    """Batches `(x, y)` for `kbert.pretraining.BiLMPretrainer`, as a `tf.data.Dataset`.

    Args:
        inputs: what `read_documents` takes (files, folders, document strings).
        vocabulary: the output words, a list (`learn_word_vocabulary`); other words are `[UNK]`.
        sequence_length: `L`, tokens per window (at least 2).
        batch_size: `B`; the last partial batch is dropped.
        shuffle_buffer: windows in the shuffle buffer (1: corpus order).
        seed: makes the stream reproducible; `None` draws one.
        repeat: repeat the corpus forever (one pass when False).

    Returns:
        `x`: `character_ids` int32 `(B, L, 50)`, `padding_mask` int32 `(B, L)`;
        `y`: `token_ids` int32 `(B, L)`, the words' ids (0 at padding).

    Example:
    >>> vocabulary = learn_word_vocabulary(["A small corpus."], 10)
    >>> x, y = next(iter(bilm_dataset(["A small corpus."], vocabulary, 7, batch_size=1, seed=0)))
    >>> vocabulary
    ['[PAD]', '[UNK]', '<S>', '</S>', '.', 'A', 'corpus', 'small']
    >>> y["token_ids"].numpy().tolist(), tuple(x["character_ids"].shape)  # <S> A small corpus . </S>
    ([[2, 5, 7, 6, 4, 3, 0]], (1, 7, 50))
    """
    if sequence_length < MIN_SEQUENCE_LENGTH or batch_size < 1 or shuffle_buffer < 1:
        raise ValueError(
            f"sequence_length must be at least {MIN_SEQUENCE_LENGTH}, batch_size and shuffle_buffer at "
            f"least 1; received {sequence_length}, {batch_size}, {shuffle_buffer}."
        )
    windows = _Windows(inputs, vocabulary, sequence_length, shuffle_buffer, seed)
    row = tf.TensorSpec((sequence_length,), tf.int32)
    dataset = tf.data.Dataset.from_generator(windows, output_signature={
        "character_ids": tf.TensorSpec((sequence_length, text.MAX_CHARACTERS), tf.int32),
        "padding_mask": row,
        "token_ids": row,
    })
    dataset = dataset.map(traced_as_written(lambda example: (
        {"character_ids": example["character_ids"], "padding_mask": example["padding_mask"]},
        {"token_ids": example["token_ids"]},
    )))
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

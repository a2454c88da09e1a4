"""Tang et al.'s data augmentation for task-specific distillation: masked, swapped and cut copies of texts.

For each copy of a text, every word is, by one uniform draw, replaced by
`[MASK]` with probability `mask_rate`, by a word drawn from the corpus (every
word of `texts`, so by frequency) with probability `swap_rate`, or kept; then,
with probability `ngram_rate`, the copy is cut to one random run of 1 to
`max_ngram` consecutive words. Tang et al. (2019) use 0.1, 0.1 and 0.25, with
n-grams of 1 to 5 words, and replace a word by one of the same part of speech;
the swap here is part-of-speech agnostic. The copies are unlabelled: a
teacher labels them (docs/algorithms.md §7).
"""

import numpy as np

from kbert.arguments import positive_int, probability


def augmented_texts(texts, copies, seed=0, mask_rate=0.1, swap_rate=0.1, ngram_rate=0.25, max_ngram=5,
                    mask_token="[MASK]"):
    """`copies` augmented copies of each of `texts` (whitespace-separated words), in text order; seeded.

    >>> augmented_texts(["a b c d e f"], 3, seed=1, ngram_rate=0.0)  # a swap (b), then two kept copies
    ['a b b d e f', 'a b c d e f', 'a b c d e f']
    >>> len(augmented_texts(["one two", "three"], 2))
    4
    """
    positive_int("copies", copies)
    positive_int("max_ngram", max_ngram)
    for name, value in (("mask_rate", mask_rate), ("swap_rate", swap_rate), ("ngram_rate", ngram_rate)):
        probability(name, value)
    if mask_rate + swap_rate > 1:
        raise ValueError(f"mask_rate + swap_rate must be at most 1; received {mask_rate} + {swap_rate}.")
    rng = np.random.default_rng(seed)
    split = [text.split() for text in texts]
    corpus = [word for words in split for word in words]
    if not corpus:
        raise ValueError("augmented_texts needs at least one word in texts.")
    augmented = []
    for words in split:
        for _ in range(copies):
            draws = rng.random(len(words))
            swaps = rng.integers(0, len(corpus), len(words))
            copy = [mask_token if draw < mask_rate else corpus[swap] if draw < mask_rate + swap_rate else word
                    for word, draw, swap in zip(words, draws, swaps)]
            if copy and rng.random() < ngram_rate:
                length = int(rng.integers(1, min(max_ngram, len(copy)) + 1))
                start = int(rng.integers(0, len(copy) - length + 1))
                copy = copy[start:start + length]
            augmented.append(" ".join(copy))
    return augmented

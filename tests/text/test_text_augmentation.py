"""Tang et al.'s augmentation: seeded, at its rates, swaps from the corpus, n-grams of the copy."""

import pytest

from kbert.text.text_augmentation import augmented_texts

pytestmark = pytest.mark.backend_independent  # NumPy on strings, the same on every backend: one run

TEXTS = [" ".join(f"w{i}" for i in range(200)), " ".join(f"v{i}" for i in range(200))]


def test_the_same_seed_gives_the_same_copies_and_another_seed_others():
    assert augmented_texts(TEXTS, 3, seed=4) == augmented_texts(TEXTS, 3, seed=4)
    assert augmented_texts(TEXTS, 3, seed=4) != augmented_texts(TEXTS, 3, seed=5)


def test_words_are_masked_and_swapped_at_their_rates_from_the_corpus():
    copies = augmented_texts(TEXTS, 50, seed=0, mask_rate=0.2, swap_rate=0.1, ngram_rate=0.0)
    assert len(copies) == 100 and copies[:50] != copies[50:]  # each text's copies, in text order
    corpus = set(" ".join(TEXTS).split())
    masked = changed = total = 0
    for index, copy in enumerate(copies):
        words, original = copy.split(), TEXTS[index // 50].split()
        assert len(words) == len(original)
        assert set(words) <= corpus | {"[MASK]"}
        masked += words.count("[MASK]")
        changed += sum(w != o and w != "[MASK]" for w, o in zip(words, original))
        total += len(words)
    assert masked / total == pytest.approx(0.2, abs=0.01)
    assert changed / total == pytest.approx(0.1, abs=0.01)  # a swap may draw the same word: a little under


def test_a_cut_copy_is_one_run_of_consecutive_words():
    copies = augmented_texts(TEXTS[:1], 200, seed=1, mask_rate=0.0, swap_rate=0.0, ngram_rate=0.5, max_ngram=7)
    cut = [copy for copy in copies if copy != TEXTS[0]]
    assert 0.4 < len(cut) / len(copies) < 0.6
    for copy in cut:
        assert 1 <= len(copy.split()) <= 7 and copy in TEXTS[0]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="copies"):
        augmented_texts(TEXTS, 0)
    with pytest.raises(ValueError, match="mask_rate"):
        augmented_texts(TEXTS, 1, mask_rate=1.0)
    with pytest.raises(ValueError, match=r"mask_rate \+ swap_rate must be at most 1"):
        augmented_texts(TEXTS, 1, mask_rate=0.6, swap_rate=0.6)
    with pytest.raises(ValueError, match="at least one word"):
        augmented_texts([" "], 1)

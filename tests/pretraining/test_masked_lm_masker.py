"""MaskedLMMasker: BERT's counts, 80/10/10 statistics, whole words, ELECTRA, seeds.

Statistical bounds are 3-sigma binomial intervals, plus the stated slack where
a second effect (a random id equal to the original) shifts the expectation.
The masker is TensorFlow code on every backend (it runs in tf.data).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from kbert.pretraining.masked_lm_masker import MaskedLMMasker

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

VOCAB = 30000
PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = [PAD, CLS, SEP]


def make_batch(batch, length, lengths=None, seed=0):
    """`[CLS] w… [SEP] [PAD]…` rows with ids in [5, VOCAB) and their padding mask."""
    rng = np.random.default_rng(seed)
    lengths = np.full(batch, length) if lengths is None else np.asarray(lengths)
    ids = rng.integers(5, VOCAB, size=(batch, length)).astype(np.int32)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = CLS
    ids[np.arange(batch), lengths - 1] = SEP
    ids[mask == 0] = PAD
    return ids, mask


def run(masker, ids, mask=None, seed=(1, 2)):
    out = masker(ids, mask, seed=tf.constant(seed, tf.int64))
    return {name: value.numpy() for name, value in out.items()}


def selected_mask(out, shape):
    chosen = np.zeros(shape, bool)
    rows = np.repeat(np.arange(shape[0]), out["mask_positions"].shape[1])
    valid = out["mask_weights"].ravel() > 0
    chosen[rows[valid], out["mask_positions"].ravel()[valid]] = True
    return chosen


def test_prediction_count_follows_bert():
    # n = min(P, max(1, round(0.15 · len))), len counting [CLS]/[SEP]; Python's
    # round: 1.5 -> 2, 4.5 -> 4, 0.45 -> 1 (the floor of one prediction).
    lengths = [3, 4, 10, 30, 31, 64, 100, 128, 128]
    ids, mask = make_batch(len(lengths), 128, lengths)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL, max_predictions=20)
    out = run(masker, ids, mask)
    expected = [min(20, max(1, round(0.15 * n))) for n in lengths]
    np.testing.assert_array_equal(out["mask_weights"].sum(axis=1), expected)


def test_mask_rate_specials_padding_and_slots():
    ids, mask = make_batch(64, 512, lengths=np.random.default_rng(1).integers(300, 513, 64))
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL, max_predictions=512)
    out = run(masker, ids, mask)
    chosen = selected_mask(out, ids.shape)
    # 15% of the real tokens (rounded per row; the bound is the rounding).
    rate = chosen.sum() / mask.sum()
    assert abs(rate - 0.15) < 0.5 * 64 / mask.sum() + 1e-9, rate
    # Specials and padding are never chosen, and left unchanged.
    assert not chosen[(ids == CLS) | (ids == SEP) | (mask == 0)].any()
    keep = ~chosen
    np.testing.assert_array_equal(out["token_ids"][keep], ids[keep])
    # Slots: increasing positions, original ids, zeros after the last prediction.
    for row in range(len(ids)):
        count = int(out["mask_weights"][row].sum())
        positions = out["mask_positions"][row]
        assert np.all(np.diff(positions[:count]) > 0)
        np.testing.assert_array_equal(out["mask_ids"][row, :count], ids[row, positions[:count]])
        assert not positions[count:].any() and not out["mask_ids"][row, count:].any()
        assert not out["mask_weights"][row, count:].any()


def test_candidates_are_chosen_uniformly():
    ids, mask = make_batch(2000, 32)
    out = run(MaskedLMMasker(VOCAB, MASK, SPECIAL), ids, mask)
    counts = selected_mask(out, ids.shape).sum(axis=0)[1:-1]  # 30 candidates, 5 chosen per row
    expected = 2000 * 5 / 30
    sigma = math.sqrt(2000 * (5 / 30) * (25 / 30))
    assert np.all(np.abs(counts - expected) < 4 * sigma), counts


@pytest.mark.parametrize(
    "rates", [(0.8, 0.1), (0.5, 0.3), (1.0, 0.0)], ids=["bert", "custom", "all_mask"]
)
def test_replacement_split(rates):
    mask_rate, random_rate = rates
    ids, mask = make_batch(64, 512)
    masker = MaskedLMMasker(
        VOCAB,
        MASK,
        SPECIAL,
        max_predictions=100,
        mask_token_rate=mask_rate,
        random_token_rate=random_rate,
    )
    out = run(masker, ids, mask)
    chosen = selected_mask(out, ids.shape)
    new, old = out["token_ids"][chosen], ids[chosen]
    n = len(new)
    assert n == 64 * 77
    fractions = {
        "mask": np.mean(new == MASK),
        "keep": np.mean(new == old),
        "random": np.mean((new != MASK) & (new != old)),
    }
    # A random id equals [MASK] or the original with probability 1/VOCAB each.
    expected = {
        "mask": mask_rate + random_rate / VOCAB,
        "keep": 1 - mask_rate - random_rate + random_rate / VOCAB,
        "random": random_rate * (1 - 2 / VOCAB),
    }
    for name, p in expected.items():
        bound = 3 * math.sqrt(p * (1 - p) / n) + 1e-9
        assert abs(fractions[name] - p) <= bound, (name, fractions[name], p, bound)
    # Random replacements are vocabulary ids.
    assert new.min() >= 0 and new.max() < VOCAB


def test_max_predictions_binds():
    ids, mask = make_batch(8, 512)
    out = run(MaskedLMMasker(VOCAB, MASK, SPECIAL, max_predictions=20), ids, mask)
    np.testing.assert_array_equal(out["mask_weights"].sum(axis=1), 20)
    # More slots than tokens: the extra slots are padding.
    ids, mask = make_batch(4, 10)
    out = run(MaskedLMMasker(VOCAB, MASK, SPECIAL, max_predictions=16), ids, mask)
    assert out["mask_positions"].shape == (4, 16)
    np.testing.assert_array_equal(out["mask_weights"].sum(axis=1), 2)


def words_of(ids, continuation):
    """Lists of positions, one per word: a `##` piece joins the non-special word before it."""
    words = []
    for position, token in enumerate(ids):
        if continuation[token] and words and ids[words[-1][-1]] not in SPECIAL:
            words[-1].append(position)
        else:
            words.append([position])
    return words


def test_whole_word_masking_never_splits_words():
    rng = np.random.default_rng(3)
    continuation = np.zeros(VOCAB, bool)
    continuation[20000:] = True  # ids >= 20000 are ## pieces
    ids, mask = make_batch(200, 128)
    pieces = rng.random(ids.shape) < 0.4
    pieces &= (mask > 0) & (ids > SEP)
    ids = np.where(pieces, rng.integers(20000, VOCAB, ids.shape), ids).astype(np.int32)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL, whole_word=True, continuation_mask=continuation)
    out = run(masker, ids, mask)
    chosen = selected_mask(out, ids.shape)
    for row in range(len(ids)):
        for word in words_of(ids[row], continuation):
            assert chosen[row, word].all() or not chosen[row, word].any(), (row, word)
    counts = chosen.sum(axis=1)
    assert counts.max() <= 19 and counts.mean() > 18  # round(0.15 · 128) = 19
    # The replacement is drawn per piece: some words are only partly [MASK].
    partly = sum(
        0 < np.sum(out["token_ids"][row, w] == MASK) < len(w)
        for row in range(len(ids))
        for w in words_of(ids[row], continuation)
        if len(w) > 1 and chosen[row, w].all()
    )
    assert partly > 0


def test_whole_word_skips_a_word_that_would_overflow():
    # One 5-piece word and 20 one-piece words: n = round(0.15 · 27) = 4, so the
    # long word never fits, and one-piece words taken after it fill the count.
    continuation = np.zeros(VOCAB, bool)
    continuation[20000:] = True
    row = [CLS, 100, 20001, 20002, 20003, 20004] + list(range(200, 220)) + [SEP]
    ids = np.asarray([row] * 300, np.int32)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL, whole_word=True, continuation_mask=continuation)
    out = run(masker, ids)
    chosen = selected_mask(out, ids.shape)
    np.testing.assert_array_equal(chosen.sum(axis=1), 4)
    assert not chosen[:, 1:6].any()


def test_electra_masking():
    ids, mask = make_batch(64, 512)
    ids[:, 10] = MASK  # an input [MASK] is never a candidate
    masker = MaskedLMMasker.electra(VOCAB, MASK, SPECIAL, max_predictions=100)
    assert (masker.mask_token_rate, masker.random_token_rate) == (0.85, 0.0)
    out = run(masker, ids, mask)
    chosen = selected_mask(out, ids.shape)
    assert not chosen[:, 10].any()
    new, old = out["token_ids"][chosen], ids[chosen]
    assert np.all((new == MASK) | (new == old))  # never a random token
    n = len(new)
    assert abs(np.mean(new == MASK) - 0.85) < 3 * math.sqrt(0.85 * 0.15 / n)


def test_seeds():
    ids, mask = make_batch(4, 64)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL)
    first = run(masker, ids, mask, seed=(5, 6))
    again = run(masker, ids, mask, seed=(5, 6))
    other = run(masker, ids, mask, seed=(5, 7))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["mask_positions"], other["mask_positions"])
    # Without seed=: a generator seeded by the constructor; calls differ, runs repeat.
    a = MaskedLMMasker(VOCAB, MASK, SPECIAL, seed=9)
    b = MaskedLMMasker(VOCAB, MASK, SPECIAL, seed=9)
    a1, a2 = a(ids, mask)["mask_positions"], a(ids, mask)["mask_positions"]
    np.testing.assert_array_equal(a1, b(ids, mask)["mask_positions"])
    assert not np.array_equal(a1, a2)


def test_in_tf_data_with_static_shapes():
    ids, mask = make_batch(6, 32)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIAL, max_predictions=7)
    dataset = tf.data.Dataset.from_tensor_slices((ids, mask)).map(
        lambda i, m: masker(i, m, seed=tf.constant([1, 2], tf.int64))
    )
    spec = dataset.element_spec
    assert spec["token_ids"].shape == (32,)
    for name in ("mask_positions", "mask_ids", "mask_weights"):
        assert spec[name].shape == (7,)
    assert spec["mask_weights"].dtype == tf.float32 and spec["mask_ids"].dtype == tf.int32
    batched = dataset.batch(3, drop_remainder=True).element_spec
    assert batched["mask_positions"].shape == (3, 7)
    single = next(iter(dataset))
    np.testing.assert_array_equal(single["mask_weights"].numpy().sum(), 5)  # round(0.15 · 32)
    # Inside a traced function a seed is required.
    with pytest.raises(ValueError, match="pass seed="):
        tf.data.Dataset.from_tensor_slices(ids).map(lambda i: masker(i))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mask_rate=0.0), "mask_rate must be a number in"),
        (dict(mask_rate=1.5), "mask_rate must be a number in"),
        (dict(mask_token_rate=-0.1), "mask_token_rate must be a number in"),
        (dict(random_token_rate=1.1), "random_token_rate must be a number in"),
        (dict(mask_token_rate=0.8, random_token_rate=0.3), "at most 1"),
        (dict(max_predictions=0), "max_predictions must be a positive integer"),
        (dict(whole_word=True), "needs the continuation_mask"),
        (
            dict(whole_word=True, continuation_mask=np.zeros(5, bool)),
            "continuation_mask must have shape",
        ),
        (dict(mask_token_id=VOCAB), "outside the vocabulary"),
        (dict(vocabulary_size=0), "vocabulary_size must be a positive integer"),
    ],
)
def test_argument_errors(kwargs, message):
    arguments = dict(vocabulary_size=VOCAB, mask_token_id=MASK, special_token_ids=SPECIAL)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        MaskedLMMasker(**arguments)


def test_rank_error():
    with pytest.raises(ValueError, match="rank 1 or 2"):
        MaskedLMMasker(VOCAB, MASK, SPECIAL)(np.ones((2, 3, 4), np.int32), seed=[1, 2])

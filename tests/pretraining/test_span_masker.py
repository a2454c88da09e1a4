"""SpanMasker: span lengths, budgets, whole words, boundaries, one draw per span."""

import math

import numpy as np
import pytest
import tensorflow as tf

from kbert.pretraining.span_masker import SpanMasker

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

VOCAB = 1000
PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = [PAD, CLS, SEP]


def make_batch(batch, length, lengths=None, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.full(batch, length) if lengths is None else np.asarray(lengths)
    ids = rng.integers(5, 500, size=(batch, length)).astype(np.int32)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = CLS
    ids[np.arange(batch), lengths - 1] = SEP
    ids[mask == 0] = PAD
    return ids, mask


def run(masker, ids, mask=None, seed=(1, 2)):
    # Through tf.function: the span loop runs as one graph (fast for long rows).
    fn = tf.function(lambda i, m, s: masker(i, m, seed=s))
    mask = np.ones_like(ids) if mask is None else mask
    out = fn(tf.constant(ids), tf.constant(mask), tf.constant(seed, tf.int64))
    return {name: value.numpy() for name, value in out.items()}


def masked_flags(out, shape):
    flags = np.zeros(shape, bool)
    rows = np.repeat(np.arange(shape[0]), out["mask_positions"].shape[1])
    valid = out["mask_weights"].ravel() > 0
    flags[rows[valid], out["mask_positions"].ravel()[valid]] = True
    return flags


def runs_of(flags):
    """`(row, start, end)` (end inclusive) of every run of True."""
    padded = np.pad(flags.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    return rows, starts, ends - 1


def test_span_length_distribution():
    masker = SpanMasker(VOCAB, MASK, SPECIAL)
    p = masker.span_length_probabilities
    assert len(p) == 10 and abs(p.sum() - 1) < 1e-12
    np.testing.assert_allclose(p[1:] / p[:-1], 0.8)  # geometric, ratio 1 - 0.2
    assert abs(np.dot(np.arange(1, 11), p) - 3.797) < 1e-3  # docs/algorithms.md §6


def test_span_length_mean():
    # Sparse masking of very long rows (1% of 16384 tokens, ~43 spans per row)
    # keeps the two biases of the observed run length small: touching spans
    # merge (up) and each row's last span is cut by the budget (down); both
    # stay under ~0.05 here. Each token is a word, so run length = words.
    ids = np.full((150, 16384), 7, np.int32)
    ids[:, 0], ids[:, -1] = CLS, SEP
    masker = SpanMasker(VOCAB, MASK, SPECIAL, mask_rate=0.01, max_predictions=164)
    out = run(masker, ids)
    flags = masked_flags(out, ids.shape)
    np.testing.assert_array_equal(flags.sum(axis=1), 164)
    _, starts, ends = runs_of(flags)
    lengths = ends - starts + 1
    standard_error = lengths.std() / math.sqrt(len(lengths))
    assert abs(lengths.mean() - 3.797) < 0.15, (lengths.mean(), standard_error)
    assert lengths.max() > 10  # merged spans exist
    assert standard_error < 0.04


def test_budget_specials_and_padding():
    lengths = [5, 10, 20, 64, 100, 128, 128, 128]
    ids, mask = make_batch(len(lengths), 128, lengths)
    out = run(SpanMasker(VOCAB, MASK, SPECIAL, max_predictions=20), ids, mask)
    flags = masked_flags(out, ids.shape)
    # One-token words: the budget min(P, ceil(0.15 · len)) is always reached.
    expected = [min(20, math.ceil(0.15 * n)) for n in lengths]
    np.testing.assert_array_equal(flags.sum(axis=1), expected)
    assert not flags[(ids == CLS) | (ids == SEP) | (mask == 0)].any()
    np.testing.assert_array_equal(out["token_ids"][~flags], ids[~flags])
    for row in range(len(ids)):
        count = expected[row]
        positions = out["mask_positions"][row]
        assert np.all(np.diff(positions[:count]) > 0)
        np.testing.assert_array_equal(out["mask_ids"][row, :count], ids[row, positions[:count]])
        for name in ("mask_positions", "mask_ids", "span_left", "span_right", "span_offsets"):
            assert not out[name][row, count:].any(), name


def test_spans_are_whole_words():
    rng = np.random.default_rng(4)
    continuation = np.zeros(VOCAB, bool)
    continuation[500:] = True
    ids, mask = make_batch(100, 128)
    pieces = (rng.random(ids.shape) < 0.5) & (ids > SEP) & (mask > 0)
    ids = np.where(pieces, rng.integers(500, VOCAB, ids.shape), ids).astype(np.int32)
    masker = SpanMasker(VOCAB, MASK, SPECIAL, max_predictions=20, continuation_mask=continuation)
    out = run(masker, ids, mask)
    flags = masked_flags(out, ids.shape)
    rows, starts, ends = runs_of(flags)

    def starts_word(row, position):  # a ## piece after a non-special token continues a word
        return not (continuation[ids[row, position]] and ids[row, position - 1] not in SPECIAL)

    for row, start, end in zip(rows, starts, ends):
        assert starts_word(row, start) and starts_word(row, end + 1)
    counts = flags.sum(axis=1)
    assert counts.max() <= 20 and counts.mean() > 17  # words are never split to fill


def test_boundaries_and_offsets():
    ids, mask = make_batch(64, 128)
    masker = SpanMasker(VOCAB, MASK, SPECIAL, mask_rate=0.5, max_predictions=64)
    out = run(masker, ids, mask)
    flags = masked_flags(out, ids.shape)
    long_runs = 0
    for row in range(len(ids)):
        count = int(out["mask_weights"][row].sum())
        for k in range(count):
            position = out["mask_positions"][row, k]
            left, right = out["span_left"][row, k], out["span_right"][row, k]
            assert left < position < right
            assert flags[row, left + 1 : right].all()  # the whole run is masked
            assert not flags[row, left] and not flags[row, right]  # bounded by unmasked tokens
            assert out["span_offsets"][row, k] == min(position - left - 1, 14)
            long_runs += position - left - 1 >= 15
    assert long_runs > 0  # runs longer than 15 exist and clip to the last row


def test_one_draw_per_span():
    # No "unchanged" outcome: a span is all [MASK] or all random ids. At 1%
    # density touching spans are rare, so almost every run is uniform; per-token
    # draws would make most multi-token runs mixed.
    ids = np.full((40, 4096), 7, np.int32)
    ids[:, 0], ids[:, -1] = CLS, SEP
    masker = SpanMasker(
        VOCAB,
        MASK,
        SPECIAL,
        mask_rate=0.01,
        max_predictions=41,
        mask_token_rate=0.5,
        random_token_rate=0.5,
    )
    out = run(masker, ids)
    flags = masked_flags(out, ids.shape)
    rows, starts, ends = runs_of(flags)
    uniform = [
        len(set(out["token_ids"][r, s : e + 1] == MASK)) == 1
        for r, s, e in zip(rows, starts, ends)
        if e > s
    ]
    assert np.mean(uniform) > 0.95


def test_replacement_split():
    ids = np.full((150, 4096), 7, np.int32)
    ids[:, 0], ids[:, -1] = CLS, SEP
    masker = SpanMasker(VOCAB, MASK, SPECIAL, mask_rate=0.01, max_predictions=41)
    out = run(masker, ids)
    flags = masked_flags(out, ids.shape)
    rows, starts, ends = runs_of(flags)
    # Classify runs by their first token (one draw per span; rare merged runs
    # follow their first span). 3-sigma binomial bounds over the runs.
    first = out["token_ids"][rows, starts]
    n = len(first)
    for fraction, p in (
        (np.mean(first == MASK), 0.8),
        (np.mean(first == 7), 0.1 + 0.1 / VOCAB),
        (np.mean((first != MASK) & (first != 7)), 0.1 * (1 - 2 / VOCAB)),
    ):
        assert abs(fraction - p) < 3 * math.sqrt(p * (1 - p) / n), (fraction, p)


def test_seeds_and_static_shapes():
    ids, mask = make_batch(4, 64)
    masker = SpanMasker(VOCAB, MASK, SPECIAL, max_predictions=12)
    first = run(masker, ids, mask, seed=(3, 4))
    again = run(masker, ids, mask, seed=(3, 4))
    other = run(masker, ids, mask, seed=(3, 5))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["mask_positions"], other["mask_positions"])
    dataset = tf.data.Dataset.from_tensor_slices((ids, mask)).map(
        lambda i, m: masker(i, m, seed=tf.constant([1, 2], tf.int64))
    )
    spec = dataset.element_spec
    assert spec["token_ids"].shape == (64,)
    for name in ("mask_positions", "mask_ids", "span_left", "span_right", "span_offsets"):
        assert spec[name].shape == (12,) and spec[name].dtype == tf.int32
    assert spec["mask_weights"].dtype == tf.float32
    # Eager calls without seed=: reproducible from the constructor's seed.
    a, b = SpanMasker(VOCAB, MASK, SPECIAL, seed=5), SpanMasker(VOCAB, MASK, SPECIAL, seed=5)
    np.testing.assert_array_equal(a(ids, mask)["mask_positions"], b(ids, mask)["mask_positions"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(geometric_p=0.0), "geometric_p must be a number in"),
        (dict(max_span_length=0), "max_span_length must be a positive integer"),
        (dict(mask_rate=2.0), "mask_rate must be a number in"),
        (dict(continuation_mask=np.zeros(3, bool)), "continuation_mask must have shape"),
    ],
)
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpanMasker(VOCAB, MASK, SPECIAL, **kwargs)

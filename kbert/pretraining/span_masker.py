"""SpanBERT's span masking as TensorFlow ops, with the boundary targets of its SBO head."""

import numpy as np

from kbert.arguments import number, positive_int
from kbert.backend.imports import lazy_import
from kbert.pretraining.masker import Masker, prediction_slots, word_indices

tf = lazy_import("tensorflow")

# SpanBERT (facebookresearch/SpanBERT `masking.py`, docs/algorithms.md §6): span
# lengths in words ~ Geometric(0.2) truncated to [1, 10]; SBO predicts at most
# 15 targets per span, so its position table has 15 rows.
MAX_SPAN_OFFSET = 14


class SpanMasker(Masker):
    """Masks contiguous spans of whole words (SpanBERT) and marks each span's boundary.

    Per sequence, until `n = min(max_predictions, ceil(mask_rate · length))`
    tokens are masked (`length` = real tokens, specials included): draw a span
    length `k` in words from a geometric distribution with parameter
    `geometric_p` truncated to `[1, max_span_length]` and renormalised (mean
    3.797 for the defaults); draw an anchor uniformly among the unmasked
    candidate positions (real, not special) whose word still fits in the
    budget; expand it to its word and extend right, word by word, to `k` words,
    stopping early at a special token, an already masked word, the end of the
    sequence, or a word that would overflow `n` (words are never split, so a
    sequence may end a few tokens under `n`). One draw per span picks its
    corruption: `[MASK]` for every token (`mask_token_rate`), a random id per
    token (`random_token_rate`), or unchanged.

    For each prediction, `span_left` and `span_right` are the positions `s-1`
    and `e+1` around the masked run `s..e` containing it (spans that touch are
    one run, as SpanBERT merges them), clipped to the sequence, and
    `span_offsets` its index inside the run. SpanBERT gives SBO at most 15
    targets per span; here every token of a longer run is still a target, and
    offsets from 14 on share the last row (`min(index, 14)`).

    The spans of a batch are drawn in a `tf.while_loop` (one span per row per
    iteration), so the masker runs inside `tf.data.Dataset.map` with static
    output shapes. Seeds work as in `MaskedLMMasker`.

    Args:
        vocabulary_size, mask_token_id, special_token_ids: as in `Masker`.
        geometric_p: parameter of the span-length distribution.
        max_span_length: longest span, in words.
        **options: `mask_rate`, `max_predictions`, `mask_token_rate`,
            `random_token_rate`, `seed` as in `Masker`, and
            `continuation_mask`: bool per vocabulary id, True for `##` pieces,
            which belong to the word before them; `None`: every token is a word.

    Call arguments:
        token_ids, padding_mask, seed: as in `MaskedLMMasker`.

    Returns:
        `MaskedLMMasker`'s dict plus `span_left`, `span_right`, `span_offsets`,
        int32 `(..., P)`, 0 in the unused slots.

    Example:

    >>> masker = SpanMasker(100, mask_token_id=3, special_token_ids=[0, 1, 2],
    ...                     max_predictions=8)
    >>> out = masker([1] + list(range(10, 40)) + [2], seed=[4, 2])
    >>> int(out["mask_weights"].numpy().sum())  # ceil(0.15 · 32) = 5
    5

    References:
        Joshi et al., 2020, SpanBERT (facebookresearch/SpanBERT
        `pretraining/fairseq/data/masking.py`).
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        *,
        geometric_p=0.2,
        max_span_length=10,
        **options,
    ):
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, **options)
        self.geometric_p = number("geometric_p", geometric_p, 0, 1, low_open=True)
        self.max_span_length = positive_int("max_span_length", max_span_length)
        lengths = np.arange(1, self.max_span_length + 1)
        weights = self.geometric_p * (1.0 - self.geometric_p) ** (lengths - 1)
        #: P(span = k words) for k = 1 .. max_span_length.
        self.span_length_probabilities = weights / weights.sum()

    def _mask_batch(self, token_ids, padding_mask, seed):
        seed = tf.cast(seed, tf.int64)
        real, candidate = self._candidates(token_ids, padding_mask)
        real_length = tf.reduce_sum(tf.cast(real, tf.float64), axis=1)
        budget = tf.cast(tf.math.ceil(real_length * self.mask_rate), tf.int32)
        budget = tf.minimum(budget, self.max_predictions)
        spans = _SpanDraws(
            token_ids, candidate, budget, self.continuation_mask, self.span_length_probabilities
        )
        masked, span_draw = spans.draw(seed, self.max_predictions)
        random_id_seed = tf.random.experimental.stateless_fold_in(seed, -1)
        outputs = prediction_slots(token_ids, masked, self.max_predictions)
        outputs["token_ids"] = self._corrupt(token_ids, masked, span_draw, random_id_seed)
        outputs.update(
            _boundary_targets(masked, outputs["mask_positions"], outputs["mask_weights"] > 0)
        )
        return outputs


class _SpanDraws:
    """The span loop of one batch: one span per row per step until the budgets are spent.

    Holds what every step reads (candidates, budgets, word bounds); `draw`
    runs the `tf.while_loop` over `step`, whose random draws come from the
    seed folded with the step number.
    """

    def __init__(self, token_ids, candidate, budget, continuation_mask, length_probabilities):
        self.shape = tf.shape(token_ids)
        self.batch, self.length = self.shape[0], self.shape[1]
        self.candidate = candidate
        self.budget = budget
        self.positions = tf.broadcast_to(tf.range(self.length)[None, :], self.shape)
        self.word_index = word_indices(token_ids, candidate, continuation_mask)
        self.word_begin, self.word_last = _segment_bounds(
            self.positions, self.word_index, tf.ones_like(candidate)
        )
        self.word_size = self.word_last - self.word_begin + 1
        self.log_probabilities = tf.math.log(tf.constant(length_probabilities, tf.float32)[None, :])

    def draw(self, seed, max_predictions):
        """`(masked, span_draw)`: bool `(B, L)` and each masked token's span-wide uniform draw."""
        # Each iteration masks at least one token in every active row, so at
        # most `max_predictions` iterations do work; the last one finds none active.
        _, masked, _, span_draw, _ = tf.while_loop(
            lambda step, masked, count, span_draw, active: tf.reduce_any(active),
            lambda *state: self.step(seed, *state),
            (
                tf.constant(0, tf.int64),
                tf.zeros(self.shape, tf.bool),
                tf.zeros([self.batch], tf.int32),
                tf.ones(self.shape, tf.float32),
                tf.ones([self.batch], tf.bool),
            ),
            maximum_iterations=max_predictions + 1,
        )
        return masked, span_draw

    def step(self, seed, step, masked, count, span_draw, active):
        """Mask one more span in every row that still has an eligible word."""
        anchor_seed, length_seed, draw_seed = tf.unstack(
            tf.random.experimental.stateless_split(
                tf.random.experimental.stateless_fold_in(seed, step), 3
            )
        )
        positions, word_index = self.positions, self.word_index
        remaining = self.budget - count
        eligible = self.candidate & ~masked & (self.word_size <= remaining[:, None])
        active = tf.reduce_any(eligible, axis=1)
        # Uniform anchor among the eligible positions: the argmax of uniform scores.
        scores = tf.random.stateless_uniform(self.shape, anchor_seed)
        anchor = tf.argmax(tf.where(eligible, scores, -1.0), axis=1, output_type=tf.int32)
        words = tf.random.stateless_categorical(
            tf.tile(self.log_probabilities, [self.batch, 1]), 1, length_seed, dtype=tf.int32
        )[:, 0] + 1
        begin = tf.gather(self.word_begin, anchor, batch_dims=1)[:, None]
        first_word = tf.gather(word_index, anchor, batch_dims=1)[:, None]
        blocked = (~self.candidate | masked) & (positions >= begin)
        stop = tf.reduce_min(tf.where(blocked, positions, self.length), axis=1, keepdims=True)
        # A prefix of whole words from `begin`: each condition holds on a prefix.
        in_span = (
            active[:, None]
            & (positions >= begin)
            & (positions < stop)
            & (word_index < first_word + words[:, None])
            & (self.word_last + 1 - begin <= remaining[:, None])
        )
        draw = tf.random.stateless_uniform([self.batch, 1], draw_seed)
        updated = (
            masked | in_span,
            count + tf.reduce_sum(tf.cast(in_span, tf.int32), axis=1),
            tf.where(in_span, draw, span_draw),
            active,
        )
        for new, old in zip(updated, (masked, count, span_draw, active)):
            new.set_shape(old.shape)  # the random draws lose the static batch size
        return (step + 1, *updated)


def _boundary_targets(masked, slots, valid):
    """`span_left`, `span_right`, `span_offsets` at the prediction `slots` (0 where not `valid`).

    Runs of consecutive masked positions are the spans (touching spans merge).
    """
    length = tf.shape(masked)[1]
    positions = tf.broadcast_to(tf.range(length)[None, :], tf.shape(masked))
    run_start = masked & ~tf.pad(masked[:, :-1], [[0, 0], [1, 0]])
    run_index = tf.cumsum(tf.cast(run_start, tf.int32), axis=1) - 1
    run_begin, run_last = _segment_bounds(positions, run_index, masked)
    bounds = {
        "span_left": tf.maximum(run_begin - 1, 0),
        "span_right": tf.minimum(run_last + 1, length - 1),
        "span_offsets": tf.minimum(positions - run_begin, MAX_SPAN_OFFSET),
    }
    return {
        name: tf.where(valid, tf.gather(values, slots, batch_dims=1), 0)
        for name, values in bounds.items()
    }


def _segment_bounds(positions, segment_index, member):
    """First and last position of each row's segment, read back at every member position.

    `segment_index` numbers segments within each row (`(B, L)`, values in
    `[0, L)`); positions where `member` is False are left out.
    """
    shape = tf.shape(positions)
    batch, length = shape[0], shape[1]
    flat = segment_index + tf.range(batch)[:, None] * length
    flat = tf.where(member, flat, batch * length)  # one spare segment for non-members
    num_segments = batch * length + 1
    first = tf.math.unsorted_segment_min(positions, flat, num_segments)
    last = tf.math.unsorted_segment_max(positions, flat, num_segments)
    return tf.gather(first, flat), tf.gather(last, flat)

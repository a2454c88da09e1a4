"""SpanBERT's span masking as TensorFlow ops, with the boundary targets of its SBO head."""

import numpy as np

from kbert.backend_utils import lazy_import
from kbert.pretraining.masked_lm_masker import _Masker, prediction_slots, word_indices

tf = lazy_import("tensorflow")

# SpanBERT (facebookresearch/SpanBERT `masking.py`, ALGORITHMS.md §2): span
# lengths in words ~ Geometric(0.2) truncated to [1, 10]; SBO predicts at most
# 15 targets per span, so its position table has 15 rows.
MAX_SPAN_OFFSET = 14


class SpanMasker(_Masker):
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
        vocabulary_size, mask_token_id, special_token_ids, mask_rate,
        max_predictions, mask_token_rate, random_token_rate, seed: as in
            `MaskedLMMasker`.
        continuation_mask: bool per vocabulary id, True for `##` pieces, which
            belong to the word before them; `None`: every token is a word.
        geometric_p: parameter of the span-length distribution.
        max_span_length: longest span, in words.

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
        mask_rate=0.15,
        max_predictions=20,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        continuation_mask=None,
        geometric_p=0.2,
        max_span_length=10,
        seed=None,
    ):
        super().__init__(
            vocabulary_size,
            mask_token_id,
            special_token_ids,
            mask_rate,
            max_predictions,
            mask_token_rate,
            random_token_rate,
            continuation_mask,
            seed,
        )
        if not 0.0 < geometric_p <= 1.0:
            raise ValueError(f"geometric_p must be in (0, 1], got {geometric_p}.")
        if max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {max_span_length}.")
        self.geometric_p = float(geometric_p)
        self.max_span_length = int(max_span_length)
        lengths = np.arange(1, self.max_span_length + 1)
        weights = self.geometric_p * (1.0 - self.geometric_p) ** (lengths - 1)
        #: P(span = k words) for k = 1 .. max_span_length.
        self.span_length_probabilities = weights / weights.sum()

    def _mask_batch(self, token_ids, padding_mask, seed):
        seed = tf.cast(seed, tf.int64)
        shape = tf.shape(token_ids)
        batch, length = shape[0], shape[1]
        real, candidate = self._candidates(token_ids, padding_mask)
        real_length = tf.reduce_sum(tf.cast(real, tf.float64), axis=1)
        budget = tf.cast(tf.math.ceil(real_length * self.mask_rate), tf.int32)
        budget = tf.minimum(budget, self.max_predictions)

        positions = tf.broadcast_to(tf.range(length)[None, :], shape)
        word_index = word_indices(token_ids, candidate, self.continuation_mask)
        word_begin, word_last = _segment_bounds(positions, word_index, tf.ones_like(candidate))
        word_size = word_last - word_begin + 1
        log_probabilities = tf.math.log(
            tf.constant(self.span_length_probabilities, tf.float32)[None, :]
        )

        def body(step, masked, count, span_draw, active):
            anchor_seed, length_seed, draw_seed = tf.unstack(
                tf.random.experimental.stateless_split(
                    tf.random.experimental.stateless_fold_in(seed, step), 3
                )
            )
            remaining = budget - count
            eligible = candidate & ~masked & (word_size <= remaining[:, None])
            active = tf.reduce_any(eligible, axis=1)
            # Uniform anchor among the eligible positions: the argmax of uniform scores.
            scores = tf.random.stateless_uniform(shape, anchor_seed)
            anchor = tf.argmax(tf.where(eligible, scores, -1.0), axis=1, output_type=tf.int32)
            words = tf.random.stateless_categorical(
                tf.tile(log_probabilities, [batch, 1]), 1, length_seed, dtype=tf.int32
            )[:, 0] + 1
            begin = tf.gather(word_begin, anchor, batch_dims=1)[:, None]
            first_word = tf.gather(word_index, anchor, batch_dims=1)[:, None]
            blocked = (~candidate | masked) & (positions >= begin)
            stop = tf.reduce_min(tf.where(blocked, positions, length), axis=1, keepdims=True)
            # A prefix of whole words from `begin`: each condition holds on a prefix.
            in_span = (
                active[:, None]
                & (positions >= begin)
                & (positions < stop)
                & (word_index < first_word + words[:, None])
                & (word_last + 1 - begin <= remaining[:, None])
            )
            draw = tf.random.stateless_uniform([batch, 1], draw_seed)
            updated = (
                masked | in_span,
                count + tf.reduce_sum(tf.cast(in_span, tf.int32), axis=1),
                tf.where(in_span, draw, span_draw),
                active,
            )
            for new, old in zip(updated, (masked, count, span_draw, active)):
                new.set_shape(old.shape)  # the random draws lose the static batch size
            return (step + 1, *updated)

        # Each iteration masks at least one token in every active row, so at
        # most `max_predictions` iterations do work; the last one finds none active.
        _, masked, _, span_draw, _ = tf.while_loop(
            lambda step, masked, count, span_draw, active: tf.reduce_any(active),
            body,
            (
                tf.constant(0, tf.int64),
                tf.zeros(shape, tf.bool),
                tf.zeros([batch], tf.int32),
                tf.ones(shape, tf.float32),
                tf.ones([batch], tf.bool),
            ),
            maximum_iterations=self.max_predictions + 1,
        )
        random_id_seed = tf.random.experimental.stateless_fold_in(seed, -1)
        outputs = prediction_slots(token_ids, masked, self.max_predictions)
        outputs["token_ids"] = self._corrupt(token_ids, masked, span_draw, random_id_seed)

        # Runs of consecutive masked positions (merged spans) and their bounds.
        run_start = masked & ~tf.pad(masked[:, :-1], [[0, 0], [1, 0]])
        run_index = tf.cumsum(tf.cast(run_start, tf.int32), axis=1) - 1
        run_begin, run_last = _segment_bounds(positions, run_index, masked)
        slots = outputs["mask_positions"]
        valid = outputs["mask_weights"] > 0

        def at_slots(values):
            return tf.where(valid, tf.gather(values, slots, batch_dims=1), 0)

        outputs["span_left"] = at_slots(tf.maximum(run_begin - 1, 0))
        outputs["span_right"] = at_slots(tf.minimum(run_last + 1, length - 1))
        outputs["span_offsets"] = at_slots(tf.minimum(positions - run_begin, MAX_SPAN_OFFSET))
        return outputs


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

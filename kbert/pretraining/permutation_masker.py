"""XLNet's permutation-LM targets as TensorFlow ops, for `tf.data` pipelines."""

import math

from kbert.arguments import positive_int
from kbert.backend.imports import lazy_import
from kbert.pretraining.masker import Masker, prediction_slots

tf = lazy_import("tensorflow")


class PermutationMasker(Masker):
    """Span-based partial prediction for XLNet: targets, a factorization order, the masks.

    Per sequence, as XLNet's paper (§2.3, partial prediction, and its span
    sampling) and transformers' `DataCollatorForPermutationLanguageModeling`:

    - spans: from position 0, draw a span length `s` uniform in
      `[1, max_span_length]`, reserve a context block of `int(s / rate)`
      tokens, put the span at a uniform offset in it, move past the block;
      so about `rate` (1/6) of the tokens are targets. Targets are real,
      non-special tokens under a span;
    - factorization order: every context token (the rest) comes before every
      target, the targets in a uniformly random order. A context token sees
      only the context; a target sees the context and the targets before it;
      nothing sees a later target. `permutation_mask[i, j] = 1` (i may NOT
      attend j) where `j` is a target not before `i` (itself included);
    - the first `P = max_predictions` targets (in position order) are
      predicted: `target_mapping` `(P, L)` is one-hot at their positions.

    No token is replaced (the query stream carries no token), so `token_ids`
    come back as they are. Randomness is stateless, as in `Masker`.

    Args:
        vocabulary_size: number of token ids.
        special_token_ids: ids never predicted (`<cls>`, `<sep>`, `<pad>`).
        prediction_rate: the share of tokens predicted (1/6).
        max_span_length: longest span (5).
        max_predictions: `P`; None gives `ceil(L · rate) + max_span_length`
            at call time, which always holds every target.
        seed: seed of the generator used by calls without `seed=`.

    Call arguments:
        token_ids: int `(L,)` or `(B, L)`; `L` static.
        padding_mask: 0/1 of the same shape (None: all real).
        seed: optional shape-`(2,)` integer seed.

    Returns:
        A dict: `token_ids`; `permutation_mask` float32 `(..., L, L)`;
        `target_mapping` float32 `(..., P, L)`; `mask_positions`, `mask_ids`
        int32 `(..., P)` (the target positions and original ids) and
        `mask_weights` float32 `(..., P)`, 0 for slots that only pad (their
        mapping points at position 0).

    Example:
    >>> masker = PermutationMasker(100, special_token_ids=[0, 1, 2], max_predictions=4)
    >>> out = masker(list(range(3, 27)), seed=[1, 2])
    >>> tuple(out["permutation_mask"].shape), tuple(out["target_mapping"].shape)
    ((24, 24), (4, 24))

    References:
        - [Yang et al., 2019](https://arxiv.org/abs/1906.08237) (XLNet)
    """

    def __init__(self, vocabulary_size, special_token_ids, *, prediction_rate=1 / 6,
                 max_span_length=5, max_predictions=None, seed=None):
        self.max_span_length = positive_int("max_span_length", max_span_length)
        positive_int("max_predictions", max_predictions, optional=True)
        # Masker's checks and seeds; no token is replaced, so no [MASK] id (0 stands in).
        super().__init__(vocabulary_size, 0, special_token_ids, mask_rate=prediction_rate,
                         max_predictions=max_predictions or 1, mask_token_rate=0.0,
                         random_token_rate=0.0, seed=seed)
        self.max_predictions = max_predictions

    def predictions_for(self, length):
        """`P` at sequence length `length`."""
        return self.max_predictions or math.ceil(length * self.mask_rate) + self.max_span_length

    def _spans(self, batch, length, seeds):
        """True under a sampled span `(B, L)`."""
        blocks = math.ceil(length / int(1 / self.mask_rate))  # each block is at least 1/rate long
        span = tf.random.stateless_uniform(
            (batch, blocks), seeds[0], 1, self.max_span_length + 1, tf.int32
        )
        context = tf.cast(tf.cast(span, tf.float32) / self.mask_rate, tf.int32)
        block_start = tf.cumsum(context, axis=1, exclusive=True)
        offset = tf.random.stateless_uniform((batch, blocks), seeds[1])
        start = block_start + tf.cast(offset * tf.cast(context - span + 1, tf.float32), tf.int32)
        position = tf.range(length)[None, None, :]
        inside = (position >= start[..., None]) & (position < (start + span)[..., None])
        return tf.reduce_any(inside, axis=1)

    def _mask_batch(self, token_ids, padding_mask, seed):
        batch, length = tf.shape(token_ids)[0], token_ids.shape[1]
        if length is None:
            raise ValueError("PermutationMasker needs a static sequence length.")
        seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
        _, candidate = self._candidates(token_ids, padding_mask)
        predictions = self.predictions_for(length)
        targets = self._spans(batch, length, seeds) & candidate
        targets &= tf.cumsum(tf.cast(targets, tf.int32), axis=1) <= predictions
        order = tf.random.stateless_uniform((batch, length), seeds[2])
        order = tf.where(targets, order, -1.0)  # the context first, then the targets
        blocked = targets[:, None, :] & (order[:, None, :] >= order[:, :, None])
        outputs = prediction_slots(token_ids, targets, predictions)
        outputs["token_ids"] = token_ids
        outputs["permutation_mask"] = tf.cast(blocked, tf.float32)
        outputs["target_mapping"] = tf.one_hot(outputs["mask_positions"], length, dtype=tf.float32)
        return outputs

"""BERT's masked-LM mask generator as TensorFlow ops, for `tf.data` pipelines.

Written here rather than taken from keras-hub's `MaskedLMMaskGenerator`, which
falls short in three ways: it counts `ceil(rate · candidates)` instead of
BERT's `round(rate · length)`, it has no whole-word masking, and its shuffle is
a stateful op, so a masked stream cannot be reproduced from a seed.
"""

from kbert.backend.imports import lazy_import
from kbert.pretraining.masker import Masker, prediction_slots, word_indices

tf = lazy_import("tensorflow")


class MaskedLMMasker(Masker):
    """Chooses and corrupts masked-LM targets, BERT's `create_masked_lm_predictions`.

    Per sequence: candidates are real tokens (`padding_mask` 1) that are not in
    `special_token_ids`; `n = min(max_predictions, max(1, round(mask_rate ·
    length)))` with `length` the real tokens, specials included; candidates are
    shuffled and the first `n` taken. Each chosen token becomes `mask_token_id`
    with probability `mask_token_rate`, a uniform random id in
    `[0, vocabulary_size)` with probability `random_token_rate`, and stays
    unchanged otherwise. With `whole_word=True`, a `##` piece (True in
    `continuation_mask`) joins the word of the candidate before it; whole words
    are taken in shuffled order, a word that would overflow `n` is skipped, and
    the replacement is still drawn per piece.

    ELECTRA's masking is `MaskedLMMasker.electra(...)`: 85% `[MASK]`, 15%
    unchanged, no random tokens, and `[MASK]` itself never a candidate.

    Randomness is stateless (`tf.random.stateless_*`): a call with `seed=` (a
    shape-`(2,)` integer tensor) is a pure function of its inputs, which is how
    `pretraining_dataset` makes a stream reproducible and still fresh every
    epoch (it feeds each example a seed derived from its own). A call without
    `seed=`, allowed in eager mode only, takes the next seed from a
    `tf.random.Generator` built from the constructor's `seed`.

    Args:
        vocabulary_size, mask_token_id, special_token_ids: as in `Masker`.
        whole_word: mask whole words (needs `continuation_mask`).
        **options: `mask_rate` (0.15), `max_predictions` (20),
            `mask_token_rate` (0.8), `random_token_rate` (0.1),
            `continuation_mask`, `seed`: as in `Masker`.

    Call arguments:
        token_ids: int `(L,)` or `(B, L)`.
        padding_mask: 0/1 of the same shape; `None` means every position is real.
        seed: optional shape-`(2,)` integer seed for this call.

    Returns:
        A dict: `token_ids` (masked, same shape as the input, int32),
        `mask_positions` int32 `(..., P)` in increasing order, `mask_ids` int32
        `(..., P)` (the original ids there), `mask_weights` float32 `(..., P)`:
        1 for real predictions, 0 for the padding slots (whose position and id
        are 0).

    Example:

    >>> masker = MaskedLMMasker(100, mask_token_id=3, special_token_ids=[0, 1, 2],
    ...                         max_predictions=4)
    >>> out = masker([1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 2, 0, 0],
    ...              padding_mask=[1] * 14 + [0, 0], seed=[1, 2])
    >>> [int(w) for w in out["mask_weights"]]  # round(0.15 · 14) = 2 predictions
    [1, 1, 0, 0]

    References:
        Devlin et al., 2019, BERT (google-research/bert `create_pretraining_data.py`);
        Clark et al., 2020, ELECTRA.
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        *,
        whole_word=False,
        **options,
    ):
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, **options)
        if whole_word and self.continuation_mask is None:
            raise ValueError("whole_word=True needs the continuation_mask of the vocabulary.")
        self.whole_word = bool(whole_word)

    @classmethod
    def electra(cls, vocabulary_size, mask_token_id, special_token_ids, **kwargs):
        """ELECTRA's masker: `[MASK]` with p=0.85, else unchanged; `[MASK]` never a candidate.

        >>> MaskedLMMasker.electra(100, 3, [0, 1, 2]).random_token_rate
        0.0
        """
        kwargs.setdefault("mask_token_rate", 0.85)
        kwargs.setdefault("random_token_rate", 0.0)
        special_token_ids = [*special_token_ids, mask_token_id]
        return cls(vocabulary_size, mask_token_id, special_token_ids, **kwargs)

    def _mask_batch(self, token_ids, padding_mask, seed):
        selection_seed, action_seed, random_id_seed = tf.unstack(
            tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
        )
        shape = tf.shape(token_ids)
        batch, length = shape[0], shape[1]
        real, candidate = self._candidates(token_ids, padding_mask)

        # Number of predictions (docs/algorithms.md §2); float64 so that the rounding
        # (half to even, as Python's `round`) matches BERT's.
        real_length = tf.reduce_sum(tf.cast(real, tf.float64), axis=1)
        num_to_predict = tf.cast(tf.round(real_length * self.mask_rate), tf.int32)
        num_to_predict = tf.minimum(self.max_predictions, tf.maximum(1, num_to_predict))

        word_index = word_indices(
            token_ids, candidate, self.continuation_mask if self.whole_word else None
        )
        flat_words = tf.reshape(word_index + tf.range(batch)[:, None] * length, [-1])
        word_sizes = tf.reshape(
            tf.math.unsorted_segment_sum(
                tf.reshape(tf.cast(candidate, tf.int32), [-1]), flat_words, batch * length
            ),
            shape,
        )

        # Shuffle the candidate words (non-candidate slots sort last) and take them greedily.
        scores = tf.random.stateless_uniform(shape, selection_seed)
        scores = tf.where(word_sizes > 0, scores, 2.0)
        order = tf.argsort(scores, axis=1, stable=True)
        sorted_sizes = tf.gather(word_sizes, order, batch_dims=1)
        if self.whole_word:
            taken_sorted = _greedy_take(sorted_sizes, num_to_predict)
        else:  # every word is one token: the first `n` shuffled candidates
            taken_sorted = (sorted_sizes > 0) & (
                tf.cumsum(sorted_sizes, axis=1) <= num_to_predict[:, None]
            )
        taken_words = tf.gather(taken_sorted, tf.argsort(order, axis=1), batch_dims=1)
        selected = tf.gather(taken_words, word_index, batch_dims=1) & candidate

        # 80/10/10 (or the configured rates), one draw per token.
        draw = tf.random.stateless_uniform(shape, action_seed)
        masked_ids = self._corrupt(token_ids, selected, draw, random_id_seed)
        outputs = prediction_slots(token_ids, selected, self.max_predictions)
        outputs["token_ids"] = masked_ids
        return outputs


def _greedy_take(sorted_sizes, num_to_predict):
    """Whole words in order, each taken when it still fits in `num_to_predict` (BERT's rule)."""

    def step(count, size):
        return tf.where(count + size <= num_to_predict, count + size, count)

    counts = tf.scan(step, tf.transpose(sorted_sizes), initializer=tf.zeros_like(num_to_predict))
    counts = tf.transpose(counts)
    before = tf.pad(counts[:, :-1], [[0, 0], [1, 0]])
    return counts > before

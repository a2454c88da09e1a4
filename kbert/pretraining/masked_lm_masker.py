"""BERT's masked-LM mask generator as TensorFlow ops, for `tf.data` pipelines.

Written here rather than taken from keras-hub's `MaskedLMMaskGenerator`, which
falls short in three ways: it counts `ceil(rate · candidates)` instead of
BERT's `round(rate · length)`, it has no whole-word masking, and its shuffle is
a stateful op, so a masked stream cannot be reproduced from a seed.
"""

import numpy as np

from kbert.backend_utils import lazy_import

tf = lazy_import("tensorflow")


class _Masker:
    """What both maskers share: argument checks, input handling, seeds.

    Subclasses set the attributes checked here and implement
    `_mask_batch(token_ids, padding_mask, seed)` on `(B, L)` int32 tensors.
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        mask_rate,
        max_predictions,
        mask_token_rate,
        random_token_rate,
        continuation_mask,
        seed,
    ):
        if vocabulary_size < 1:
            raise ValueError(f"vocabulary_size must be positive, got {vocabulary_size}.")
        if not 0 <= mask_token_id < vocabulary_size:
            raise ValueError(
                f"mask_token_id {mask_token_id} is outside the vocabulary [0, {vocabulary_size})."
            )
        if not 0.0 < mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in (0, 1], got {mask_rate}.")
        if max_predictions < 1:
            raise ValueError(f"max_predictions must be at least 1, got {max_predictions}.")
        for name, rate in (
            ("mask_token_rate", mask_token_rate),
            ("random_token_rate", random_token_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate}.")
        if mask_token_rate + random_token_rate > 1.0:
            raise ValueError(
                "mask_token_rate + random_token_rate must be at most 1, got "
                f"{mask_token_rate} + {random_token_rate}."
            )
        if continuation_mask is not None:
            continuation_mask = np.asarray(continuation_mask, bool)
            if continuation_mask.shape != (vocabulary_size,):
                raise ValueError(
                    f"continuation_mask must have shape ({vocabulary_size},), one entry per "
                    f"vocabulary id, got {continuation_mask.shape}."
                )
        self.vocabulary_size = int(vocabulary_size)
        self.mask_token_id = int(mask_token_id)
        self.special_token_ids = sorted({int(i) for i in special_token_ids})
        self.mask_rate = float(mask_rate)
        self.max_predictions = int(max_predictions)
        self.mask_token_rate = float(mask_token_rate)
        self.random_token_rate = float(random_token_rate)
        self.continuation_mask = continuation_mask
        self.seed = seed
        self._generator = None

    def __call__(self, token_ids, padding_mask=None, seed=None):
        token_ids = tf.cast(token_ids, tf.int32)
        rank = token_ids.shape.rank
        if rank not in (1, 2):
            raise ValueError(f"token_ids must have rank 1 or 2, got shape {token_ids.shape}.")
        if padding_mask is None:
            padding_mask = tf.ones_like(token_ids)
        padding_mask = tf.cast(padding_mask, tf.int32)
        if seed is None:
            seed = self._next_seed()
        if rank == 1:
            outputs = self._mask_batch(token_ids[None], padding_mask[None], seed)
            return {name: value[0] for name, value in outputs.items()}
        return self._mask_batch(token_ids, padding_mask, seed)

    def _next_seed(self):
        if not tf.executing_eagerly():
            raise ValueError(
                "Inside tf.data or tf.function, pass seed= (a shape-(2,) integer tensor) "
                "to the masker."
            )
        if self._generator is None:
            self._generator = (
                tf.random.Generator.from_non_deterministic_state()
                if self.seed is None
                else tf.random.Generator.from_seed(self.seed)
            )
        return self._generator.make_seeds(1)[:, 0]

    def _candidates(self, token_ids, padding_mask):
        """`(real, candidate)` bool `(B, L)`: real tokens, and those that may be masked."""
        real = padding_mask > 0
        special = tf.constant(self.special_token_ids or [-1], tf.int32)
        is_special = tf.reduce_any(token_ids[:, :, None] == special, axis=-1)
        return real, real & ~is_special

    def _corrupt(self, token_ids, selected, draw, seed):
        """`[MASK]` where `draw < mask_token_rate`, a random id where below the sum of rates."""
        random_ids = tf.random.stateless_uniform(
            tf.shape(token_ids), seed, minval=0, maxval=self.vocabulary_size, dtype=tf.int32
        )
        return tf.where(
            selected & (draw < self.mask_token_rate),
            self.mask_token_id,
            tf.where(
                selected & (draw < self.mask_token_rate + self.random_token_rate),
                random_ids,
                token_ids,
            ),
        )


class MaskedLMMasker(_Masker):
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
        vocabulary_size: number of token ids.
        mask_token_id: id of `[MASK]`.
        special_token_ids: ids never masked (`[CLS]`, `[SEP]`, `[PAD]`, ...).
        mask_rate: fraction of the sequence to predict.
        max_predictions: `P`, the fixed number of prediction slots.
        mask_token_rate: probability that a chosen token becomes `[MASK]`.
        random_token_rate: probability that it becomes a random id.
        whole_word: mask whole words (needs `continuation_mask`).
        continuation_mask: bool per vocabulary id, True for `##` pieces.
        seed: seed of the generator used by calls without `seed=`.

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
        mask_rate=0.15,
        max_predictions=20,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        whole_word=False,
        continuation_mask=None,
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
        if whole_word and continuation_mask is None:
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

        # Number of predictions (ALGORITHMS.md §1); float64 so that the rounding
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


def word_indices(token_ids, candidate, continuation_mask):
    """`(B, L)` int32: the index of each position's word within its row.

    A candidate whose id is a `##` piece (True in `continuation_mask`)
    continues the word of the candidate before it; every other position
    starts a word. `continuation_mask=None`: every position is a word.
    """
    if continuation_mask is None:
        starts = tf.ones_like(candidate)
    else:
        table = tf.constant(continuation_mask)
        is_piece = tf.gather(table, tf.clip_by_value(token_ids, 0, len(continuation_mask) - 1))
        after_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
        starts = ~(is_piece & candidate & after_candidate)
    return tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1


def _greedy_take(sorted_sizes, num_to_predict):
    """Whole words in order, each taken when it still fits in `num_to_predict` (BERT's rule)."""

    def step(count, size):
        return tf.where(count + size <= num_to_predict, count + size, count)

    counts = tf.scan(step, tf.transpose(sorted_sizes), initializer=tf.zeros_like(num_to_predict))
    counts = tf.transpose(counts)
    before = tf.pad(counts[:, :-1], [[0, 0], [1, 0]])
    return counts > before


def prediction_slots(token_ids, selected, max_predictions):
    """`mask_positions`, `mask_ids`, `mask_weights` for the selected positions (at most `P`).

    Positions come in increasing order; unused slots hold position 0, id 0 and
    weight 0.
    """
    length = tf.shape(token_ids)[1]
    positions = tf.range(length)[None, :]
    keys = tf.sort(tf.where(selected, positions, length + positions), axis=1)
    extra = tf.maximum(max_predictions - length, 0)
    keys = tf.pad(keys, [[0, 0], [0, extra]], constant_values=2 * length)
    keys = keys[:, :max_predictions]
    keys.set_shape([token_ids.shape[0], max_predictions])
    valid = keys < length
    mask_positions = tf.where(valid, keys, 0)
    mask_ids = tf.where(valid, tf.gather(token_ids, mask_positions, batch_dims=1), 0)
    return {
        "mask_positions": mask_positions,
        "mask_ids": mask_ids,
        "mask_weights": tf.cast(valid, tf.float32),
    }

"""What the mask generators share: their settings and checks, seeds, candidates, corruption.

`MaskedLMMasker` (BERT) and `SpanMasker` (SpanBERT) subclass `Masker`; the
module's functions are the steps both take (word boundaries, prediction slots).
All of it is TensorFlow ops, for `tf.data` pipelines on any Keras backend.
"""

import numpy as np

from kbert.arguments import non_negative_int, number, positive_int
from kbert.backend.imports import lazy_import

tf = lazy_import("tensorflow")


class Masker:
    """A mask generator's settings, argument checks and calling convention.

    A subclass implements `_mask_batch(token_ids, padding_mask, seed)` on
    `(B, L)` int32 tensors, returning the dict described in `MaskedLMMasker`,
    and may use `_candidates` (which positions may be masked) and `_corrupt`
    (replace the chosen tokens). `__call__` takes one sequence or a batch and
    a seed, or draws the seed in eager mode.

    Args:
        vocabulary_size: number of token ids.
        mask_token_id: id of `[MASK]`.
        special_token_ids: ids never masked (`[CLS]`, `[SEP]`, `[PAD]`, ...).
        mask_rate: fraction of the sequence to predict.
        max_predictions: `P`, the fixed number of prediction slots.
        mask_token_rate: probability that a chosen token becomes `[MASK]`.
        random_token_rate: probability that it becomes a random id.
        continuation_mask: bool per vocabulary id, True for `##` pieces.
        seed: seed of the generator used by calls without `seed=`.

    Example (a masker that always picks the first candidate):

    >>> class FirstToken(Masker):
    ...     def _mask_batch(self, token_ids, padding_mask, seed):
    ...         _, candidate = self._candidates(token_ids, padding_mask)
    ...         first = candidate & (tf.cumsum(tf.cast(candidate, tf.int32), axis=1) == 1)
    ...         outputs = prediction_slots(token_ids, first, self.max_predictions)
    ...         outputs["token_ids"] = tf.where(first, self.mask_token_id, token_ids)
    ...         return outputs
    >>> masker = FirstToken(100, mask_token_id=3, special_token_ids=[0, 1, 2], max_predictions=2)
    >>> out = masker([1, 10, 11, 2], seed=[0, 0])
    >>> out["token_ids"].numpy().tolist(), out["mask_positions"].numpy().tolist()
    ([1, 3, 11, 2], [1, 0])
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        *,
        mask_rate=0.15,
        max_predictions=20,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        continuation_mask=None,
        seed=None,
    ):
        positive_int("vocabulary_size", vocabulary_size)
        if not 0 <= non_negative_int("mask_token_id", mask_token_id) < vocabulary_size:
            raise ValueError(
                f"mask_token_id {mask_token_id} is outside the vocabulary [0, {vocabulary_size})."
            )
        number("mask_rate", mask_rate, 0, 1, low_open=True)
        positive_int("max_predictions", max_predictions)
        number("mask_token_rate", mask_token_rate, 0, 1)
        number("random_token_rate", random_token_rate, 0, 1)
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

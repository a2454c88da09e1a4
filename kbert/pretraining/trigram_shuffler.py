"""StructBERT's word-structural objective as TensorFlow ops: shuffled trigrams to put back."""

import math

import numpy as np

from kbert.arguments import number, positive_int
from kbert.backend.imports import lazy_import
from kbert.pretraining.masker import prediction_slots

tf = lazy_import("tensorflow")

TRIGRAM = 3
# The five orders of a trigram other than its own: slot s takes the token of slot ORDERS[k][s].
ORDERS = np.array([[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]], np.int32)


class TrigramShuffler:
    """Shuffles 5% of the unmasked trigrams; the targets are the original tokens there.

    StructBERT (Wang et al., 2019, §2.1): "after the masking procedure ...
    we randomly choose 5% of the unmasked trigrams for random shuffling", and
    the model predicts, at each position of a shuffled trigram, the token
    that stood there (K = 3). Here, per sequence: the positions are cut into
    consecutive, non-overlapping trigrams at a random phase (0, 1 or 2); a
    trigram is a candidate when its three tokens are real, not special and
    not chosen by the masked LM; each candidate is shuffled with probability
    `rate` (0.05), into one of the five orders other than its own, uniformly.
    At most `max_trigrams` are shuffled (the first in position order).

    Randomness is stateless: a call is a pure function of its inputs and
    `seed` (a shape-`(2,)` integer tensor).

    Args:
        special_token_ids: ids never shuffled (`[CLS]`, `[SEP]`, `[PAD]`).
        rate: the share of candidate trigrams shuffled (0.05).
        max_trigrams: `T`, the shuffled trigrams kept per sequence; None
            gives `ceil(rate · L / 3) + 3` at call time.

    Call arguments:
        token_ids: int `(B, L)`, already masked for the masked LM.
        padding_mask: 0/1 `(B, L)`.
        masked: bool `(B, L)`, True where the masked LM chose a token.
        seed: shape-`(2,)` integer seed.

    Returns:
        A dict: `token_ids` with the trigrams shuffled; `order_positions`,
        `order_ids` int32 `(B, 3T)`: each shuffled position and its original
        token; `order_weights` float32 `(B, 3T)`, 0 for slots that only pad.

    Example:
    >>> shuffler = TrigramShuffler([0, 1, 2], rate=1.0)
    >>> out = shuffler(tf.constant([[5, 6, 7, 8, 9, 10]]), tf.ones((1, 6), tf.int32),
    ...                tf.zeros((1, 6), bool), seed=[0, 1])
    >>> sorted(out["token_ids"][0].numpy().tolist())
    [5, 6, 7, 8, 9, 10]

    References:
        - [Wang et al., 2019](https://arxiv.org/abs/1908.04577) (StructBERT)
    """

    def __init__(self, special_token_ids, rate=0.05, max_trigrams=None):
        self.special_token_ids = sorted({int(i) for i in special_token_ids})
        self.rate = number("rate", rate, 0, 1, low_open=True)
        self.max_trigrams = positive_int("max_trigrams", max_trigrams, optional=True)

    def trigrams_for(self, length):
        """`T` at sequence length `length`."""
        return self.max_trigrams or math.ceil(self.rate * length / TRIGRAM) + 3

    def __call__(self, token_ids, padding_mask, masked, seed):
        token_ids = tf.cast(token_ids, tf.int32)
        batch, length = tf.shape(token_ids)[0], token_ids.shape[1]
        seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
        special = tf.constant(self.special_token_ids or [-1], tf.int32)
        candidate = (tf.cast(padding_mask, tf.int32) > 0) & ~tf.cast(masked, tf.bool)
        candidate &= ~tf.reduce_any(token_ids[:, :, None] == special, axis=-1)
        phase = tf.random.stateless_uniform((batch, 1), seeds[0], 0, TRIGRAM, tf.int32)
        shifted = tf.range(length)[None, :] + TRIGRAM - phase
        window, slot = shifted // TRIGRAM, shifted % TRIGRAM
        windows = length // TRIGRAM + 2
        members = tf.one_hot(window, windows, dtype=tf.int32)  # (B, L, W)
        full = tf.reduce_sum(members * tf.cast(candidate, tf.int32)[..., None], axis=1) == TRIGRAM
        chosen = full & (tf.random.stateless_uniform((batch, windows), seeds[1]) < self.rate)
        trigrams = self.trigrams_for(length)
        chosen &= tf.cumsum(tf.cast(chosen, tf.int32), axis=1) <= trigrams
        order = tf.random.stateless_uniform((batch, windows), seeds[2], 0, len(ORDERS), tf.int32)
        source_slot = tf.gather(tf.constant(ORDERS), tf.gather(order, window, batch_dims=1))
        source_slot = tf.gather(source_slot, slot, batch_dims=2)
        shuffled = tf.gather(chosen, window, batch_dims=1)
        source = tf.range(length)[None, :] - slot + source_slot
        moved = tf.gather(token_ids, tf.where(shuffled, source, 0), batch_dims=1)
        slots = prediction_slots(token_ids, shuffled, TRIGRAM * trigrams)
        return {
            "token_ids": tf.where(shuffled, moved, token_ids),
            "order_positions": slots["mask_positions"],
            "order_ids": slots["mask_ids"],
            "order_weights": slots["mask_weights"],
        }

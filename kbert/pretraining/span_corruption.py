"""T5's span corruption objective as TensorFlow ops, with static output shapes."""

from kbert.arguments import non_negative_int, number, positive_int
from kbert.backend.imports import lazy_import, traced_as_written

tf = lazy_import("tensorflow")


def span_corruption_lengths(inputs_length, noise_density=0.15, mean_noise_span_length=3.0):
    """`(raw_length, targets_length)` for corrupted inputs of exactly `inputs_length` tokens.

    T5R `random_spans_helper`: the largest raw length `T` whose corrupted input
    `(T − n_noise) + k + 1` (kept tokens, one sentinel per span, EOS) fits.

    >>> span_corruption_lengths(512)
    (568, 114)
    """
    if inputs_length < 3:
        raise ValueError(f"inputs_length must be at least 3; received {inputs_length}.")

    def lengths(raw):
        noise, spans = noise_counts(raw, noise_density, mean_noise_span_length)
        return raw - noise + spans + 1, noise + spans + 1

    raw = inputs_length - 1
    while lengths(raw + 1)[0] <= inputs_length:
        raw += 1
    return raw, lengths(raw)[1]


def noise_counts(length, noise_density, mean_noise_span_length):
    """`(noise tokens, noise spans)` for `length` tokens (docs/algorithms.md §9).

    >>> noise_counts(568, 0.15, 3.0)
    (85, 28)
    """
    length = max(length, 2)
    noise = min(max(int(round(length * noise_density)), 1), length - 1)
    spans = max(int(round(noise / mean_noise_span_length)), 1)
    return noise, spans


class SpanCorruption:
    """T5's span corruption: drop random spans, mark each with a sentinel, predict them.

    For raw token sequences of exactly `raw_length` ids (from
    `span_corruption_lengths(inputs_length)`, e.g. 568 for 512), the noise
    mask has `n = clip(round(0.15·L), 1, L−1)` noise tokens in
    `k = max(1, round(n/3))` spans; the noise and the kept tokens are each cut
    into `k` non-empty parts by random segmentation (a shuffled 0/1 vector of
    `k−1` ones, cumulative sum) and interleaved keep₀, noise₀, keep₁, … (so the
    sequence ends with noise). Span `i` is replaced by the sentinel
    `vocabulary_size − 1 − i` (`<extra_id_i>`):

        inputs  = keep₀ S₀ keep₁ S₁ … S_{k−1} EOS             (inputs_length ids)
        targets = S₀ noise₀ S₁ noise₁ … S_{k−1} noise_{k−1} EOS (targets_length ids)

    Randomness is stateless: each call takes a `seed` (shape `(2,)` integers),
    so it runs in `tf.data.Dataset.map` whatever the Keras backend.

    Args:
        inputs_length: length of the corrupted inputs (T5: 512).
        vocabulary_size: tokenizer vocabulary including the sentinels at its top
            (T5: 32100).
        noise_density: fraction of noise tokens (0.15).
        mean_noise_span_length: mean span length (3.0).
        end_id: EOS id (T5: 1).

    Call arguments:
        token_ids: int32 `(raw_length,)`.
        seed: int `(2,)`.

    Returns:
        dict of int32 `inputs` `(inputs_length,)` and `targets` `(targets_length,)`.

    Example:
    >>> corruption = SpanCorruption(inputs_length=16, vocabulary_size=100)
    >>> corruption.raw_length, corruption.targets_length
    (17, 5)
    >>> out = corruption(tf.range(2, 19), seed=[0, 1])
    >>> out["inputs"].shape.as_list(), out["targets"].shape.as_list()
    ([16], [5])
    """

    def __init__(
        self,
        inputs_length,
        vocabulary_size,
        noise_density=0.15,
        mean_noise_span_length=3.0,
        end_id=1,
    ):
        self.inputs_length = positive_int("inputs_length", inputs_length)
        self.vocabulary_size = positive_int("vocabulary_size", vocabulary_size)
        self.noise_density = number(
            "noise_density", noise_density, 0, 1, low_open=True, high_open=True
        )
        self.mean_noise_span_length = number("mean_noise_span_length", mean_noise_span_length, 1)
        self.end_id = non_negative_int("end_id", end_id)
        self.raw_length, self.targets_length = span_corruption_lengths(
            self.inputs_length, self.noise_density, self.mean_noise_span_length
        )
        self.num_noise, self.num_spans = noise_counts(
            self.raw_length, self.noise_density, self.mean_noise_span_length
        )

    def noise_mask(self, seed):
        """bool `(raw_length,)`: the T5R `random_spans_noise_mask`."""
        seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
        spans = self.num_spans

        def segment_lengths(items, seed):
            first = tf.cast(tf.range(items - 1) < spans - 1, tf.int32)
            first = tf.random.experimental.stateless_shuffle(first, seed)
            segment_ids = tf.cumsum(tf.pad(first, [[1, 0]]))
            return tf.math.segment_sum(tf.ones_like(segment_ids), segment_ids)

        noise = segment_lengths(self.num_noise, seed)
        keep = segment_lengths(self.raw_length - self.num_noise, seed + [0, 1])
        interleaved = tf.reshape(tf.stack([keep, noise], axis=1), [2 * spans])
        starts = tf.cumsum(interleaved)[:-1]
        indicator = tf.math.unsorted_segment_sum(tf.ones_like(starts), starts, self.raw_length)
        return tf.equal(tf.math.floormod(tf.cumsum(indicator), 2), 1)

    def _with_sentinels(self, token_ids, noise):
        previous = tf.pad(noise[:-1], [[1, 0]])
        first = tf.logical_and(noise, tf.logical_not(previous))
        sentinels = self.vocabulary_size - tf.cumsum(tf.cast(first, tf.int32))
        token_ids = tf.where(first, sentinels, token_ids)
        kept = tf.boolean_mask(token_ids, tf.logical_not(tf.logical_and(noise, previous)))
        return tf.concat([kept, [self.end_id]], axis=0)

    def __call__(self, token_ids, seed):
        token_ids = tf.convert_to_tensor(token_ids, tf.int32)
        if token_ids.shape.rank != 1 or token_ids.shape[0] not in (None, self.raw_length):
            raise ValueError(
                f"SpanCorruption expects token_ids of shape ({self.raw_length},) for "
                f"inputs_length={self.inputs_length}; received {token_ids.shape}."
            )
        return self.corrupt(tf.ensure_shape(token_ids, [self.raw_length]), self.noise_mask(seed))

    def corrupt(self, token_ids, noise):
        """`{"inputs", "targets"}` of `token_ids` `(raw_length,)` with the spans of `noise` (from `noise_mask`)."""
        inputs = self._with_sentinels(token_ids, noise)
        targets = self._with_sentinels(token_ids, tf.logical_not(noise))
        return {
            "inputs": tf.ensure_shape(inputs, [self.inputs_length]),
            "targets": tf.ensure_shape(targets, [self.targets_length]),
        }

    def dataset(self, token_ids, batch_size, seed=0, shuffle=True):
        """A `tf.data` pipeline for `kbert.tasks.Seq2SeqLM.fit`: `(model inputs, targets)` batches.

        `token_ids` (a flat list or array of the corpus's ids, documents joined
        by EOS) is cut into `raw_length` chunks (the remainder dropped), each
        corrupted with its own seed, batched (remainder dropped: static
        shapes) and turned into teacher-forcing inputs (targets shifted right
        behind the start id 0).
        """
        chunks = tf.data.Dataset.from_tensor_slices(tf.convert_to_tensor(token_ids, tf.int32))
        chunks = chunks.batch(self.raw_length, drop_remainder=True)
        if shuffle:
            chunks = chunks.shuffle(4096, seed=seed)
        examples = chunks.enumerate().map(
            traced_as_written(lambda index, ids: self(ids, seed=tf.stack([tf.cast(seed, tf.int64), index]))),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        return seq2seq_batches(examples, batch_size)


def seq2seq_batches(examples, batch_size, pad_id=0):
    """`{"inputs", "targets"}` examples to `(model inputs, targets)` batches for `kbert.tasks.Seq2SeqLM.fit`.

    Batched with the remainder dropped (static shapes); the decoder reads the
    targets shifted right behind the start id 0 (T5's pad), and the padding
    masks mark the ids that are not `pad_id`.
    """

    def to_model(example):
        targets = example["targets"]
        decoder = tf.concat([tf.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
        inputs = {
            "encoder_token_ids": example["inputs"],
            "encoder_padding_mask": tf.cast(tf.not_equal(example["inputs"], pad_id), tf.int32),
            "decoder_token_ids": decoder,
            "decoder_padding_mask": tf.cast(tf.not_equal(targets, pad_id), tf.int32),
        }
        return inputs, targets

    return examples.batch(batch_size, drop_remainder=True).map(traced_as_written(to_model))

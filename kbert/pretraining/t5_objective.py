"""The T5 paper's pretraining objectives (its Tables 4 and 6) as `tf.data` maps with static shapes."""

from kbert.arguments import non_negative_int, number, one_of, positive_int
from kbert.backend.imports import lazy_import
from kbert.pretraining.span_corruption import SpanCorruption, noise_counts, seq2seq_batches

tf = lazy_import("tensorflow")

T5_OBJECTIVES = ("prefix_lm", "bert_style", "deshuffle", "mass", "span_corruption", "drop_tokens")
"""The objectives of `T5Objective`, in the T5 paper's order."""

# The share of BERT-style's corrupted tokens that become a random token instead of the mask (T5 §3.3.1).
RANDOM_TOKEN_SHARE = 0.1
_SHUFFLED = 1 << 16


class T5Objective:
    """One of T5's pretraining objectives: raw token ids to `(inputs, targets)` of static lengths.

    On `raw_length` ids `x` (ending in no EOS), with `n = clip(round(0.15·L), 1, L−1)`
    tokens chosen uniformly without replacement as the corrupted ones, `M` the mask
    (`<extra_id_0>`, the top id, as T5's `noise_token_to_sentinel`) and EOS appended:

    - `prefix_lm`: a split `s` uniform in `[1, L−1]`; inputs `x[:s]`, targets `x[s:]`.
    - `bert_style`: the corrupted tokens become `M`, or with probability 0.1 a
      uniform random regular token; targets the whole `x`.
    - `deshuffle`: inputs a uniform random permutation of `x`; targets `x`.
    - `mass`: the corrupted tokens become `M` (no random tokens); targets `x`.
    - `span_corruption`: `SpanCorruption` (random spans of mean length 3, one
      sentinel each; its own raw length).
    - `drop_tokens`: inputs `x` without the corrupted tokens; targets the
      corrupted tokens in order.

    Inputs are `inputs_length` ids and targets `targets_length`, padded with
    `pad_id` where an example is shorter (prefix LM, drop tokens). Randomness
    is stateless: `draws(seed)` gives an example's random decisions and
    `__call__` applies them, so a map runs on any Keras backend and a seed
    gives the same example every time. See docs/algorithms.md §9 and §26.

    Args:
        objective: one of `T5_OBJECTIVES`.
        inputs_length: the length of the inputs (EOS included).
        vocabulary_size: ids, sentinels at the top (`<extra_id_0>` last).
        num_sentinels: the sentinel ids at the top; random tokens are drawn
            below them, from `first_regular_id` on.
        corruption_rate: the share of corrupted tokens (0.15).
        mean_noise_span_length: `span_corruption`'s mean span length (3).
        end_id, pad_id, first_regular_id: T5's 1, 0 and 3 (after pad, EOS, unknown).

    Example:
    >>> objective = T5Objective("drop_tokens", inputs_length=16, vocabulary_size=100, num_sentinels=10)
    >>> objective.raw_length, objective.targets_length  # 18 − round(0.15·18) + EOS = 16 inputs
    (18, 4)
    >>> example = objective(tf.range(10, 28), seed=[0, 1])
    >>> example["inputs"].shape.as_list(), int(example["targets"][-1])
    ([16], 1)
    """

    def __init__(self, objective, inputs_length, vocabulary_size, num_sentinels=100, corruption_rate=0.15,
                 mean_noise_span_length=3.0, end_id=1, pad_id=0, first_regular_id=3):
        self.objective = one_of("objective", objective, T5_OBJECTIVES)
        self.inputs_length = positive_int("inputs_length", inputs_length)
        if inputs_length < 3:
            raise ValueError(f"inputs_length must be at least 3; received {inputs_length}.")
        self.vocabulary_size = positive_int("vocabulary_size", vocabulary_size)
        self.num_sentinels = positive_int("num_sentinels", num_sentinels)
        self.corruption_rate = number("corruption_rate", corruption_rate, 0, 1, low_open=True, high_open=True)
        self.mean_noise_span_length = number("mean_noise_span_length", mean_noise_span_length, 1)
        self.end_id = non_negative_int("end_id", end_id)
        self.pad_id = non_negative_int("pad_id", pad_id)
        self.first_regular_id = non_negative_int("first_regular_id", first_regular_id)
        if first_regular_id >= vocabulary_size - num_sentinels:
            raise ValueError(f"No regular ids: first_regular_id {first_regular_id} is not below the "
                             f"{num_sentinels} sentinels at the top of {vocabulary_size} ids.")
        self.mask_id = vocabulary_size - 1
        self._span_corruption = SpanCorruption(inputs_length, vocabulary_size, corruption_rate,
                                               mean_noise_span_length, end_id)
        self.raw_length, self.targets_length = self._lengths()

    def _lengths(self):
        """`(raw_length, targets_length)`: the raw ids that fill `inputs_length`, and the longest targets."""
        if self.objective == "span_corruption":
            return self._span_corruption.raw_length, self._span_corruption.targets_length
        if self.objective == "drop_tokens":  # the largest raw length whose kept tokens and EOS fit
            raw = self.inputs_length - 1
            while raw + 1 - self._corrupted(raw + 1) + 1 <= self.inputs_length:
                raw += 1
            return raw, self._corrupted(raw) + 1
        raw = self.inputs_length - 1
        return raw, raw if self.objective == "prefix_lm" else raw + 1

    def _corrupted(self, length):
        return noise_counts(length, self.corruption_rate, self.mean_noise_span_length)[0]

    def draws(self, seed):
        """The example's random decisions for `seed` (int `(2,)`), a dict of tensors.

        `noise` (bool `(raw_length,)`, the corrupted tokens), `random` (bool,
        those that BERT-style makes random tokens), `replacements` (int32, the
        random tokens, read where `random`), `order` (a permutation of
        `range(raw_length)`, deshuffling's) and `split` (the prefix LM's).
        """
        seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
        length = self.raw_length
        if self.objective == "span_corruption":
            noise = self._span_corruption.noise_mask(seed)
        else:  # n tokens uniformly without replacement: the n smallest of L uniform draws
            noise = tf.argsort(tf.argsort(tf.random.stateless_uniform([length], seed))) < self._corrupted(length)
        random = tf.random.stateless_uniform([length], seed + [0, 1]) < RANDOM_TOKEN_SHARE
        replacements = tf.random.stateless_uniform(
            [length], seed + [0, 2], self.first_regular_id, self.vocabulary_size - self.num_sentinels, tf.int32)
        order = tf.argsort(tf.random.stateless_uniform([length], seed + [0, 3]))
        split = tf.random.stateless_uniform([], seed + [0, 4], 1, length, tf.int32)
        return {"noise": noise, "random": tf.logical_and(noise, random), "replacements": replacements,
                "order": tf.cast(order, tf.int32), "split": split}

    def _padded(self, ids, length):
        ids = tf.concat([ids, [self.end_id]], axis=0)
        ids = tf.pad(ids, [[0, length - tf.shape(ids)[0]]], constant_values=self.pad_id)
        return tf.ensure_shape(ids, [length])

    def apply(self, token_ids, draws):
        """`{"inputs", "targets"}` of `token_ids` (`(raw_length,)`) under `draws` (from `draws`)."""
        x, noise = token_ids, draws["noise"]
        if self.objective == "span_corruption":
            return self._span_corruption.corrupt(x, noise)
        if self.objective == "prefix_lm":
            inputs, targets = x[: draws["split"]], x[draws["split"]:]
        elif self.objective in ("bert_style", "mass"):
            masked = tf.where(noise, self.mask_id, x)
            inputs, targets = tf.where(draws["random"], draws["replacements"], masked), x
            if self.objective == "mass":
                inputs = masked
        elif self.objective == "deshuffle":
            inputs, targets = tf.gather(x, draws["order"]), x
        else:  # drop_tokens
            inputs, targets = tf.boolean_mask(x, tf.logical_not(noise)), tf.boolean_mask(x, noise)
        return {"inputs": self._padded(inputs, self.inputs_length),
                "targets": self._padded(targets, self.targets_length)}

    def __call__(self, token_ids, seed):
        """`{"inputs", "targets"}` (int32) of one example: `token_ids` `(raw_length,)`, `seed` int `(2,)`."""
        token_ids = tf.convert_to_tensor(token_ids, tf.int32)
        if token_ids.shape.rank != 1 or token_ids.shape[0] not in (None, self.raw_length):
            raise ValueError(f"{self.objective} expects token_ids of shape ({self.raw_length},) for "
                             f"inputs_length={self.inputs_length}; received {token_ids.shape}.")
        return self.apply(tf.ensure_shape(token_ids, [self.raw_length]), self.draws(seed))

    def dataset(self, token_ids, batch_size, seed=0, shuffle=True, repeat=False):
        """`(model inputs, targets)` batches for `kbert.tasks.Seq2SeqLM.fit`, as `SpanCorruption.dataset`.

        `token_ids` (the corpus's ids, documents joined by EOS) is cut into
        `raw_length` chunks; with `repeat`, each pass reshuffles and draws new
        corruptions (seeded by the pass and the chunk), endlessly.
        """
        chunks = tf.data.Dataset.from_tensor_slices(tf.convert_to_tensor(token_ids, tf.int32))
        chunks = chunks.batch(self.raw_length, drop_remainder=True)
        if shuffle:  # the whole corpus's chunks, up to a buffer of _SHUFFLED chunks
            count = int(chunks.cardinality())
            chunks = chunks.shuffle(min(max(count, 1), _SHUFFLED), seed=seed, reshuffle_each_iteration=True)
        if repeat:
            chunks = chunks.repeat()
        examples = chunks.enumerate().map(
            lambda index, ids: self(ids, seed=tf.stack([tf.cast(seed, tf.int64), index])),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return seq2seq_batches(examples, batch_size, self.pad_id)

"""BART's denoising objective (text infilling, sentence permutation) as TensorFlow ops, static shapes."""

import numpy as np

from kbert.arguments import non_negative_int, number, positive_int
from kbert.backend.imports import lazy_import, traced_as_written

tf = lazy_import("tensorflow")

# BART's special ids (kbert.models.bart): <s> 0, <pad> 1, </s> 2.
START_ID, PAD_ID, END_ID = 0, 1, 2
_LAST = 3.0  # a sort key past every random key in [0, 1)


class BartDenoising:
    """BART's noise (docs/algorithms.md §10): shuffle the sentences, then replace spans by one mask each.

    For one text of `n` real tokens (padded to `sequence_length − 2`, the
    room left for `<s>` and `</s>`), with the sentence of each token:

    1. sentence permutation: the sentences are put in a random order (each
       keeps its tokens in order), with probability `permute_sentences`;
    2. text infilling: `t = round(mask_rate · n)` tokens are masked in spans
       whose lengths are drawn from Poisson(`poisson_lambda`) until they sum
       to at least `t`, the last one cut so they sum to exactly `t`
       (fairseq's `add_whole_word_mask`). The spans and the `n − t` kept tokens
       are interleaved in a uniformly random order; each span, a zero-length
       one included (an insertion), becomes ONE `mask_id`.

    The encoder reads `<s> noised </s>`, the decoder predicts the original
    `<s> text </s>` (the target), reading it shifted right behind `</s>`
    (`decoder_start_token_id` 2), as transformers' `shift_tokens_right` makes
    it. Every output has `sequence_length` ids, padded with 1 (a noised
    text longer than that, possible only with many insertions, is cut).

    Randomness is stateless: each call takes a `seed` (shape `(2,)`
    integers), so it runs in `tf.data.Dataset.map` whatever the Keras backend.

    Args:
        sequence_length: length of every output.
        mask_id: the `<mask>` id.
        mask_rate: fraction of tokens masked (0.3).
        poisson_lambda: mean span length (3.0).
        permute_sentences: probability of shuffling the sentences (1.0).

    Call arguments:
        token_ids: int32 `(sequence_length − 2,)`, the text then padding.
        sentence_ids: int32, same shape: each real token's sentence index
            (0, 1, ... in text order), −1 on padding.
        seed: int `(2,)`.

    Returns:
        dict of int32 `(sequence_length,)`: `encoder_token_ids`,
        `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask`
        and `targets`.

    Example:
    >>> noise = BartDenoising(sequence_length=12, mask_id=4)
    >>> out = noise(tf.range(5, 15), tf.constant([0] * 4 + [1] * 6), seed=[0, 1])
    >>> out["encoder_token_ids"].shape.as_list(), out["targets"].numpy().tolist()
    ([12], [0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 2])
    """

    def __init__(self, sequence_length, mask_id, mask_rate=0.3, poisson_lambda=3.0,
                 permute_sentences=1.0):
        self.sequence_length = positive_int("sequence_length", sequence_length)
        if sequence_length < 4:
            raise ValueError(f"sequence_length must be at least 4; received {sequence_length}.")
        self.text_length = sequence_length - 2
        self.mask_id = non_negative_int("mask_id", mask_id)
        self.mask_rate = number("mask_rate", mask_rate, 0, 1, high_open=True)
        self.poisson_lambda = number("poisson_lambda", poisson_lambda, 0, None, low_open=True)
        self.permute_sentences = number("permute_sentences", permute_sentences, 0, 1)

    # --- Sentence permutation -----------------------------------------------

    def permute(self, token_ids, sentence_ids, seed):
        """`token_ids` with their sentences in a random order (padding stays last)."""
        length = self.text_length
        real = sentence_ids >= 0
        num_sentences = tf.reduce_max(sentence_ids) + 1
        keys = tf.random.stateless_uniform([length], seed)
        keys = tf.where(tf.range(length) < num_sentences, keys, _LAST)
        # rank[s]: where sentence s goes in the new order.
        rank = tf.math.invert_permutation(tf.argsort(keys, stable=True))
        sentence_rank = tf.gather(rank, tf.maximum(sentence_ids, 0))
        token_keys = tf.where(real, sentence_rank * length + tf.range(length), length * length)
        return tf.gather(token_ids, tf.argsort(token_keys, stable=True))

    # --- Text infilling -----------------------------------------------------

    def span_lengths(self, num_tokens, seed):
        """`(lengths, num_spans, draws)`: the noise spans of a text of `num_tokens` real tokens.

        `draws` int32 `(sequence_length − 2 + 1,)` are the Poisson draws;
        `lengths` are the first `num_spans` of them, the last cut so they sum
        to `round(mask_rate · num_tokens)`, and zeros after them (a zero
        inside the first `num_spans` is an insertion). No span when nothing
        is masked. (The spans before the last are biased short, since the
        last is the one that reaches the count; all `num_spans` draws
        together follow the Poisson law, by Wald's identity.)
        """
        capacity = self.text_length + 1
        to_mask = tf.cast(tf.round(self.mask_rate * tf.cast(num_tokens, tf.float32)), tf.int32)
        draws = tf.cast(
            tf.random.stateless_poisson([capacity], seed, self.poisson_lambda, dtype=tf.int32),
            tf.int32,
        )
        total = tf.cumsum(draws)
        # The first span whose running total reaches `to_mask` is the last.
        num_spans = tf.minimum(tf.reduce_sum(tf.cast(total < to_mask, tf.int32)) + 1, capacity)
        num_spans = tf.where(to_mask > 0, num_spans, 0)
        used = tf.range(capacity) < num_spans
        lengths = tf.where(used, draws, 0)
        before_last = tf.reduce_sum(tf.where(tf.range(capacity) < num_spans - 1, draws, 0))
        lengths = tf.where(tf.range(capacity) == num_spans - 1, to_mask - before_last, lengths)
        return lengths, num_spans, draws

    def infill(self, token_ids, num_tokens, seed):
        """`token_ids` (real ones first) with its noise spans replaced by one `mask_id` each.

        Returns int32 `(sequence_length − 2,)`: the noised text, padded with 1.
        """
        lengths, num_spans, _ = self.span_lengths(num_tokens, seed)
        kept = num_tokens - tf.reduce_sum(lengths)
        slots = lengths.shape[0] + self.text_length
        items = num_spans + kept
        # A uniformly random interleaving: items 0 .. num_spans−1 are the spans in order,
        # the others the kept tokens in order.
        keys = tf.random.stateless_uniform([slots], seed + [0, 1])
        keys = tf.where(tf.range(slots) < items, keys, _LAST)
        is_span = tf.argsort(keys, stable=True) < num_spans
        span_index = tf.cumsum(tf.cast(is_span, tf.int32), exclusive=True)
        consumed = tf.where(
            is_span, tf.gather(lengths, tf.minimum(span_index, lengths.shape[0] - 1)), 1
        )
        source = tf.cumsum(consumed, exclusive=True)  # original position of each slot
        padded = tf.pad(token_ids, [[0, slots]], constant_values=PAD_ID)
        noised = tf.where(is_span, self.mask_id, tf.gather(padded, tf.minimum(source, slots)))
        noised = tf.where(tf.range(slots) < items, noised, PAD_ID)
        return noised[: self.text_length]

    # --- The example --------------------------------------------------------

    def _framed(self, token_ids):
        """`<s> text </s>` padded to `sequence_length`, and its padding mask."""
        real = tf.not_equal(token_ids, PAD_ID)
        length = tf.reduce_sum(tf.cast(real, tf.int32))
        framed = tf.concat([[START_ID], token_ids, [PAD_ID]], axis=0)
        framed = tf.tensor_scatter_nd_update(framed, [[length + 1]], [END_ID])
        return framed, tf.cast(tf.range(self.sequence_length) < length + 2, tf.int32)

    def __call__(self, token_ids, sentence_ids, seed):
        token_ids = tf.convert_to_tensor(token_ids, tf.int32)
        sentence_ids = tf.convert_to_tensor(sentence_ids, tf.int32)
        for name, tensor in (("token_ids", token_ids), ("sentence_ids", sentence_ids)):
            if tensor.shape.rank != 1 or tensor.shape[0] not in (None, self.text_length):
                raise ValueError(
                    f"BartDenoising expects {name} of shape ({self.text_length},) for "
                    f"sequence_length={self.sequence_length}; received {tensor.shape}."
                )
        token_ids = tf.ensure_shape(tf.where(sentence_ids >= 0, token_ids, PAD_ID), [self.text_length])
        seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
        num_tokens = tf.reduce_sum(tf.cast(sentence_ids >= 0, tf.int32))
        shuffle = tf.random.stateless_uniform([], seed + [0, 2]) < self.permute_sentences
        permuted = tf.cond(
            shuffle, lambda: self.permute(token_ids, sentence_ids, seed + [0, 3]), lambda: token_ids
        )
        encoder, encoder_mask = self._framed(self.infill(permuted, num_tokens, seed))
        targets, target_mask = self._framed(token_ids)
        return {
            "encoder_token_ids": tf.ensure_shape(encoder, [self.sequence_length]),
            "encoder_padding_mask": encoder_mask,
            "decoder_token_ids": tf.concat([[END_ID], targets[:-1]], axis=0),
            "decoder_padding_mask": target_mask,
            "targets": tf.ensure_shape(targets, [self.sequence_length]),
        }

    def dataset(self, examples, batch_size, seed=0, shuffle=True, repeat=False):
        """A `tf.data` pipeline for `kbert.tasks.Seq2SeqLM.fit`: `(model inputs, targets)` batches.

        `examples` is `(token_ids, sentence_ids)`, two int32 arrays
        `(count, sequence_length − 2)` (see `bart_examples`); each is noised
        with its own seed (`repeat`: an endless stream, noised afresh on
        every pass), and batches drop the remainder (static shapes).
        """
        token_ids, sentence_ids = examples
        data = tf.data.Dataset.from_tensor_slices((token_ids, sentence_ids))
        if shuffle:
            data = data.shuffle(4096, seed=seed)
        if repeat:
            data = data.repeat()

        def noise(index, example):
            out = self(*example, seed=tf.stack([tf.cast(seed, tf.int64), index]))
            targets = out.pop("targets")
            return out, targets

        return data.enumerate().map(traced_as_written(noise), num_parallel_calls=tf.data.AUTOTUNE).batch(
            batch_size, drop_remainder=True
        )


def bart_examples(documents, tokenizer, sequence_length):
    """`(token_ids, sentence_ids)` int32 NumPy arrays `(count, sequence_length − 2)` for `BartDenoising`.

    Each document is a list of sentences; consecutive sentences of one
    document are packed into a text while they fit (a sentence longer than
    the room is cut), padded with 1, `sentence_ids` −1 there.
    `tokenizer` is a `kbert.text.BytePairTokenizer` (any object whose
    `tokenize` takes a batch of strings and returns a ragged tensor).
    """
    room = sequence_length - 2
    texts = []
    for sentences in documents:
        current = []
        for ids in tokenizer.tokenize(list(sentences)).to_list() if sentences else []:
            ids = ids[:room]
            if current and sum(map(len, current)) + len(ids) > room:
                texts.append(current)
                current = []
            if ids:
                current.append(ids)
        if current:
            texts.append(current)
    token_ids = np.full((len(texts), room), PAD_ID, "int32")
    sentence_ids = np.full((len(texts), room), -1, "int32")
    for row, text in enumerate(texts):
        flat = [token for sentence in text for token in sentence]
        token_ids[row, : len(flat)] = flat
        sentence_ids[row, : len(flat)] = [i for i, s in enumerate(text) for _ in s]
    return token_ids, sentence_ids

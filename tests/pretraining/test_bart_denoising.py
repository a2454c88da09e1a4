"""BartDenoising: text infilling and sentence permutation (docs/algorithms.md §10), their statistics
over many seeds, and the static shapes of the pipeline."""

import math

import numpy as np
import pytest

from kbert.pretraining.bart_denoising import BartDenoising, bart_examples

tf = pytest.importorskip("tensorflow")
scipy_stats = pytest.importorskip("scipy.stats")

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

MASK = 4
LENGTH = 102  # 100 text tokens
SAMPLES = 600


def text(num_tokens, sentence_lengths=None):
    """Distinct ids 10, 11, ... and their sentence ids, padded to the text length."""
    sentence_lengths = sentence_lengths or [num_tokens]
    ids = np.full(LENGTH - 2, 1, "int32")
    ids[:num_tokens] = np.arange(10, 10 + num_tokens)
    sentences = np.full(LENGTH - 2, -1, "int32")
    sentences[:num_tokens] = np.repeat(np.arange(len(sentence_lengths)), sentence_lengths)
    return ids, sentences


def many(noise, ids, sentences, function, count=SAMPLES):
    """`function(noise, seed)` over `count` seeds in one traced `tf.data` map."""
    seeds = tf.data.Dataset.range(count)
    mapped = seeds.map(lambda index: function(noise, tf.stack([tf.constant(7, tf.int64), index])))
    return [tf.nest.map_structure(lambda t: t.numpy(), item) for item in mapped]


def kept_and_masks(encoder_ids):
    """The body between `<s>` and `</s>`."""
    body = encoder_ids[1 : list(encoder_ids).index(2)]
    return body


def test_infilling_masks_thirty_percent_in_poisson_spans_one_mask_each():
    noise = BartDenoising(LENGTH, MASK, permute_sentences=0.0)
    ids, sentences = text(90)
    outputs = many(noise, ids, sentences, lambda n, seed: (n(ids, sentences, seed)["encoder_token_ids"],
                                                            n.span_lengths(90, seed)))
    to_mask = round(0.3 * 90)
    lengths, insertions = [], 0
    for encoder_ids, (span_lengths, num_spans, draws) in outputs:
        body = kept_and_masks(encoder_ids)
        kept = body[body != MASK]
        # 30% of the tokens are gone, the others keep their order; one mask per span.
        assert len(kept) == 90 - to_mask
        assert np.all(np.diff(kept) > 0)
        assert (body == MASK).sum() == num_spans
        assert span_lengths[:num_spans].sum() == to_mask and not span_lengths[num_spans:].any()
        # A mask between two kept neighbours of the original is a zero-length span.
        for before, mask, after in zip(body[:-2], body[1:-1], body[2:]):
            insertions += int(mask == MASK and MASK not in (before, after) and after == before + 1)
        lengths.extend(draws[:num_spans].tolist())  # the last one before its cut
    print(f"{len(lengths)} spans: mean length {np.mean(lengths):.3f}, {insertions} insertions")
    assert insertions > 0
    assert abs(np.mean(lengths) - 3.0) < 0.1
    observed = np.bincount(np.minimum(lengths, 9), minlength=10)
    pmf = [math.exp(-3) * 3**k / math.factorial(k) for k in range(9)]
    expected = np.array(pmf + [1 - sum(pmf)]) * len(lengths)
    _, p_value = scipy_stats.chisquare(observed, expected)
    print(f"chi-square against Poisson(3): p = {p_value:.3f}")
    assert p_value > 0.001


def test_lengths_are_drawn_until_they_reach_the_masked_count():
    noise = BartDenoising(LENGTH, MASK)
    for num_tokens in (1, 2, 7, 100):
        for seed in range(5):
            lengths, num_spans, draws = (t.numpy() for t in noise.span_lengths(num_tokens, [seed, 3]))
            to_mask = round(0.3 * num_tokens)
            assert lengths.sum() == to_mask
            assert (num_spans == 0) == (to_mask == 0)
            if num_spans:  # full draws, short of the count until the last one reaches it
                np.testing.assert_array_equal(lengths[: num_spans - 1], draws[: num_spans - 1])
                assert draws[: num_spans - 1].sum() < to_mask <= draws[:num_spans].sum()


def test_permutation_keeps_the_sentences_and_shuffles_them():
    noise = BartDenoising(LENGTH, MASK, mask_rate=0.0)
    sentence_lengths = [5, 9, 3, 12, 7, 4]
    ids, sentences = text(40, sentence_lengths)
    bounds = np.cumsum([0] + sentence_lengths)
    original = [tuple(range(10 + a, 10 + b)) for a, b in zip(bounds[:-1], bounds[1:])]
    orders = set()
    for out in many(noise, ids, sentences, lambda n, seed: n(ids, sentences, seed), count=200):
        body = kept_and_masks(out["encoder_token_ids"])
        starts = [i for i, token in enumerate(body) if token - 10 in bounds[:-1]]
        pieces = [tuple(body[a:b]) for a, b in zip(starts, starts[1:] + [len(body)])]
        assert sorted(pieces) == sorted(original)
        orders.add(tuple(p[0] for p in pieces))
        np.testing.assert_array_equal(out["targets"][1:41], np.arange(10, 50))
    assert len(orders) > 100  # 720 orders of 6 sentences


def test_framing_and_teacher_forcing_inputs():
    noise = BartDenoising(12, MASK, mask_rate=0.0, permute_sentences=0.0)
    out = {k: v.numpy().tolist() for k, v in noise(np.arange(5, 15), np.zeros(10), seed=[0, 0]).items()}
    assert out["encoder_token_ids"] == [0, *range(5, 15), 2]
    assert out["targets"] == [0, *range(5, 15), 2]
    assert out["decoder_token_ids"] == [2, 0, *range(5, 15)]
    assert out["decoder_padding_mask"] == [1] * 12


def test_dataset_has_static_shapes_and_fits_the_examples():
    class Tokenizer:  # words to ids 10, 11, ...: enough to check the packing
        def tokenize(self, sentences):
            return tf.ragged.constant([[10 + len(w) for w in s.split()] for s in sentences])

    documents = [["one two three", "four five"], ["a much longer sentence here"] * 3]
    token_ids, sentence_ids = bart_examples(documents, Tokenizer(), sequence_length=10)
    assert token_ids.shape == sentence_ids.shape == (4, 8)  # the long sentences one a text
    assert sentence_ids[0].tolist() == [0, 0, 0, 1, 1, -1, -1, -1]
    assert token_ids[0].tolist() == [13, 13, 15, 14, 14, 1, 1, 1]
    dataset = BartDenoising(10, MASK).dataset((token_ids, sentence_ids), batch_size=2)
    inputs_spec, targets_spec = dataset.element_spec
    assert targets_spec.shape.as_list() == [2, 10]
    assert all(spec.shape.as_list() == [2, 10] for spec in inputs_spec.values())
    assert len(list(dataset)) == 2


def test_errors():
    with pytest.raises(ValueError, match="mask_rate"):
        BartDenoising(10, MASK, mask_rate=1.0)
    with pytest.raises(ValueError, match="poisson_lambda"):
        BartDenoising(10, MASK, poisson_lambda=0.0)
    with pytest.raises(ValueError, match="at least 4"):
        BartDenoising(3, MASK)
    with pytest.raises(ValueError, match=r"token_ids of shape \(8,\)"):
        BartDenoising(10, MASK)(np.arange(9), np.zeros(9), seed=[0, 0])

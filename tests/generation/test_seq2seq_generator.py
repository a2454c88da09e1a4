"""Seq2SeqGenerator against step-by-step NumPy references built on `T5.decode`
(full teacher-forced decoding, no cache).

One model and one compiled loop per configuration serve the whole module:
compiling the loop is what costs time, and a loop compiled once follows later
changes to the weights (they are inputs of the compiled function).
"""

import itertools

import keras
import numpy as np
import pytest

from kbert.generation import Seq2SeqGenerator
from kbert.models import T5

END = 1
STEPS = 6


def model(vocabulary_size=30, scale=3.0):
    keras.utils.set_random_seed(1)
    t5 = T5(
        vocabulary_size=vocabulary_size,
        num_layers=1,
        num_decoder_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        dropout=0.0,
        tie_embeddings=False,
    )
    # Sharper logits, so that greedy paths are varied.
    t5.lm_head.kernel.assign(t5.lm_head.kernel * scale)
    return t5


def inputs(batch=4, length=6, vocabulary_size=30):
    rng = np.random.default_rng(0)
    ids = rng.integers(2, vocabulary_size, (batch, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    ids[mask == 0] = 0
    return {"encoder_token_ids": ids, "encoder_padding_mask": mask}


@pytest.fixture(scope="module")
def t5():
    return model()


@pytest.fixture(scope="module")
def greedy(t5):
    return Seq2SeqGenerator(t5, max_new_tokens=STEPS)


def log_probabilities(t5, x, prefixes):
    """log p(next | prefix) for each row's prefix `(batch, length)`, via full decoding."""
    encoder = t5.encode(x["encoder_token_ids"], x["encoder_padding_mask"])
    logits = keras.ops.convert_to_numpy(
        t5.decode(prefixes, np.ones_like(prefixes), encoder, x["encoder_padding_mask"])
    ).astype(np.float64)
    peak = logits.max(-1, keepdims=True)
    return logits - np.log(np.exp(logits - peak).sum(-1, keepdims=True)) - peak


def np_greedy(t5, x, steps):
    batch = x["encoder_token_ids"].shape[0]
    buffer = np.zeros((batch, steps), "int32")  # start id 0, then the generated ids
    generated = np.zeros((batch, steps), "int32")
    finished = np.zeros(batch, bool)
    for i in range(steps):
        next_ids = log_probabilities(t5, x, buffer)[:, i].argmax(-1)
        next_ids = np.where(finished, 0, next_ids)
        finished |= next_ids == END
        generated[:, i] = next_ids
        if i + 1 < steps:
            buffer[:, i + 1] = next_ids
    return generated


def test_greedy_with_and_without_cache_matches_numpy_loop_and_stops_at_end(t5, greedy):
    x = inputs()
    # Make the end id take over from the token greedy picks for row 0 at step 2.
    kernel = keras.ops.convert_to_numpy(t5.lm_head.kernel)
    token = greedy(x)[0, 2]
    ending = kernel.copy()
    ending[:, END] = 1.05 * kernel[:, token]
    t5.lm_head.kernel.assign(ending)
    try:
        expected = np_greedy(t5, x, STEPS)
        np.testing.assert_array_equal(greedy(x), expected)
        no_cache = Seq2SeqGenerator(t5, max_new_tokens=STEPS, use_cache=False)
        np.testing.assert_array_equal(no_cache(x), expected)
    finally:
        t5.lm_head.kernel.assign(kernel)
    end = expected[0].tolist().index(END)  # row 0 ends by step 2 (its token there became END)
    assert end <= 2 and not expected[0, end + 1 :].any()  # stopped, then padded


@pytest.mark.slow(reason="the generation loop compiled (torch.compile, XLA) against the eager loop")
def test_eager_loop_equals_compiled_loop(t5):
    # XLA on TensorFlow and JAX; on PyTorch, torch.compile of the cached step.
    x = inputs()
    eager = Seq2SeqGenerator(t5, max_new_tokens=STEPS, jit_compile=False)(x)
    compiled = Seq2SeqGenerator(t5, max_new_tokens=STEPS, jit_compile=True)(x)
    np.testing.assert_array_equal(compiled, eager)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile's cache")
@pytest.mark.slow(reason="two models' generation steps compiled")
def test_compiled_steps_of_two_models_are_kept_apart():
    # Same tensor shapes, other layers (gated FFN): the compiled steps must not be shared.
    x = inputs()
    plain = model()
    gated = T5(vocabulary_size=30, num_layers=1, num_decoder_layers=2, num_heads=2, hidden_dim=8,
               intermediate_dim=16, dropout=0.0, use_gated_activation=True)
    for t5 in (plain, gated, plain):
        eager = Seq2SeqGenerator(t5, max_new_tokens=STEPS, jit_compile=False)(x)
        compiled = Seq2SeqGenerator(t5, max_new_tokens=STEPS, jit_compile=True)(x)
        np.testing.assert_array_equal(compiled, eager)


def test_tiny_top_p_is_greedy(t5, greedy):
    # top_p keeps at least the most likely token, so a tiny nucleus is greedy.
    x = inputs()
    sampled = Seq2SeqGenerator(t5, max_new_tokens=STEPS, strategy="sample", top_p=1e-6, seed=3)(x)
    np.testing.assert_array_equal(sampled, greedy(x))


def first_step(rows):
    """Row 0 of `inputs()`, repeated."""
    return {k: np.repeat(v[:1], rows, axis=0) for k, v in inputs().items()}


def test_top_k_keeps_the_k_best_and_follows_the_seed(t5):
    # temperature 6 flattens the model's logits, so that samples vary.
    x = first_step(64)
    log_p = log_probabilities(t5, first_step(1), np.zeros((1, 1), "int32"))[0, -1]
    generator = Seq2SeqGenerator(t5, max_new_tokens=1, strategy="sample", temperature=6.0, top_k=3, seed=5)
    state = keras.ops.convert_to_numpy(generator.seed_generator.state)
    samples = generator(x)[:, 0]
    assert set(samples) <= set(np.argsort(-log_p)[:3]) and len(set(samples)) > 1
    # The seed state advances between calls, and the same state gives the same draws.
    assert not np.array_equal(generator(x)[:, 0], samples)
    generator.seed_generator.state.assign(state)
    np.testing.assert_array_equal(generator(x)[:, 0], samples)


def test_top_p_keeps_the_nucleus(t5):
    # top_p: the smallest most-likely set with mass >= p (docs/algorithms.md §17), after temperature.
    x = first_step(64)
    logits = log_probabilities(t5, first_step(1), np.zeros((1, 1), "int32"))[0, -1] / 6.0
    log_p = logits - np.log(np.exp(logits).sum())
    order = np.argsort(-log_p)
    mass = np.cumsum(np.exp(log_p[order]))
    nucleus = set(order[: int(np.searchsorted(mass, 0.5) + 1)])
    generator = Seq2SeqGenerator(t5, max_new_tokens=1, strategy="sample", temperature=6.0, top_p=0.5, seed=5)
    samples = generator(x)[:, 0]
    assert set(samples) <= nucleus and len(set(samples)) > 1


def test_beam_search_finds_the_exact_best_sequence():
    # With as many beams as sequences of length steps-1, beam search is exhaustive.
    vocabulary, steps = 5, 3
    t5, x = model(vocabulary, scale=2.0), inputs(batch=2, vocabulary_size=vocabulary)
    generated = Seq2SeqGenerator(
        t5, max_new_tokens=steps, strategy="beam", num_beams=vocabulary ** (steps - 1), length_penalty=0.0
    )(x)
    candidates = []
    for sequence in itertools.product(range(vocabulary), repeat=steps):
        end = sequence.index(END) if END in sequence else None
        if end is not None and any(sequence[end + 1 :]):
            continue  # after the end id only padding, at no cost
        candidates.append((list(sequence), steps if end is None else end + 1))
    ids = np.array([[0] + c[:-1] for c, _ in candidates], "int32")
    for row in range(2):
        repeated = {k: np.repeat(v[row : row + 1], len(candidates), axis=0) for k, v in x.items()}
        log_p = log_probabilities(t5, repeated, ids)
        scores = [
            sum(log_p[n, i, sequence[i]] for i in range(scored))
            for n, (sequence, scored) in enumerate(candidates)
        ]
        assert generated[row].tolist() == candidates[int(np.argmax(scores))][0]


def test_errors(t5):
    with pytest.raises(ValueError, match="strategy must be one of"):
        Seq2SeqGenerator(t5, strategy="nucleus")
    with pytest.raises(ValueError, match="top_p"):
        Seq2SeqGenerator(t5, strategy="sample", top_p=1.5)
    with pytest.raises(ValueError, match="top_k"):
        Seq2SeqGenerator(t5, strategy="sample", top_k=100)
    with pytest.raises(ValueError, match="jit_compile"):
        Seq2SeqGenerator(t5, jit_compile="xla")
    with pytest.raises(ValueError, match="lack"):
        Seq2SeqGenerator(t5)({"encoder_token_ids": np.ones((1, 2), "int32")})
    with pytest.raises(ValueError, match="encoder-decoder backbone"):
        Seq2SeqGenerator(keras.layers.Dense(2))

"""CausalLMGenerator against step-by-step NumPy loops over each prompt alone (no left padding,
no cache: `GPT2.decode` on the whole text so far). Its parity with transformers'
`generate` is in tests/checkpoints/test_gpt2_converter.py; the samplers themselves
are checked in tests/generation/test_samplers.py.
"""

import functools
import itertools

import keras
import numpy as np
import pytest

from kbert.generation import CausalLMGenerator
from kbert.models import GPT2

END = 0
STEPS = 6
VOCABULARY = 30


def model(vocabulary_size=VOCABULARY, scale=4.0):
    keras.utils.set_random_seed(1)
    gpt2 = GPT2(vocabulary_size=vocabulary_size, num_layers=2, num_heads=2, hidden_dim=8,
                intermediate_dim=16, max_positions=24, dropout=0.0, end_id=END)
    # Sharper logits, so that greedy paths are varied.
    table = gpt2.token_embedding.embeddings
    table.assign(table * scale)
    return gpt2


def prompts(lengths=(5, 2, 4), vocabulary_size=VOCABULARY):
    rng = np.random.default_rng(0)
    width = max(lengths)
    ids = np.full((len(lengths), width), END, "int32")
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, width - length :] = rng.integers(1, vocabulary_size, length)
        mask[row, width - length :] = 1
    return {"token_ids": ids, "padding_mask": mask}


@pytest.fixture(scope="module")
def gpt2():
    return model()


@pytest.fixture(scope="module")
def greedy(gpt2):
    return CausalLMGenerator(gpt2, max_new_tokens=STEPS)


def log_probabilities(gpt2, text):
    """log p(next | text) `(vocab,)` of one row, padded on the right to the model's positions (the causal
    mask keeps the padding out of the text's logits; one shape, so that JAX compiles each eager op once)."""
    ids = np.full((1, gpt2.max_positions), END, "int32")
    mask = np.zeros_like(ids)
    ids[0, : len(text)], mask[0, : len(text)] = text, 1
    logits = keras.ops.convert_to_numpy(gpt2.decode(ids, mask))[0, len(text) - 1]
    logits = logits.astype(np.float64) - logits.max()
    return logits - np.log(np.exp(logits).sum())


def np_greedy(gpt2, x, steps, end_id=END):
    generated = np.full((len(x["token_ids"]), steps), END, "int32")
    for row, (ids, mask) in enumerate(zip(x["token_ids"], x["padding_mask"])):
        text = list(ids[mask == 1])
        for step in range(steps):
            generated[row, step] = log_probabilities(gpt2, text).argmax()
            if generated[row, step] == end_id:
                break
            text.append(generated[row, step])
    return generated


@pytest.mark.slow(reason="every generated token compared with a NumPy loop, with and without the cache")
def test_greedy_with_and_without_cache_matches_numpy_loop_and_stops_at_end(gpt2, greedy):
    x = prompts()
    expected = np_greedy(gpt2, x, STEPS)
    np.testing.assert_array_equal(greedy(x), expected)
    no_cache = CausalLMGenerator(gpt2, max_new_tokens=STEPS, use_cache=False)
    np.testing.assert_array_equal(no_cache(x), expected)
    # With row 0's third token as the end id, row 0 stops there, padded, and the others go on.
    end = int(expected[0, 2])
    ending = CausalLMGenerator(gpt2, max_new_tokens=STEPS, end_id=end, pad_id=END)(x)
    np.testing.assert_array_equal(ending, np_greedy(gpt2, x, STEPS, end_id=end))
    stop = ending[0].tolist().index(end)
    assert stop <= 2 and not ending[0, stop + 1 :].any()


def test_a_one_token_prompt_and_one_row(gpt2):
    x = {"token_ids": np.array([[7]], "int32"), "padding_mask": np.ones((1, 1), "int32")}
    np.testing.assert_array_equal(
        CausalLMGenerator(gpt2, max_new_tokens=STEPS)(x), np_greedy(gpt2, x, STEPS)
    )


@pytest.mark.slow(reason="the generation loop compiled (torch.compile, XLA) against the eager loop")
def test_eager_loop_equals_compiled_loop(gpt2):
    # XLA on TensorFlow and JAX; on PyTorch, torch.compile of the cached step.
    x = prompts()
    eager = CausalLMGenerator(gpt2, max_new_tokens=STEPS, jit_compile=False)(x)
    compiled = CausalLMGenerator(gpt2, max_new_tokens=STEPS, jit_compile=True)(x)
    np.testing.assert_array_equal(compiled, eager)


def test_prompts_of_another_length_reuse_the_generator(greedy, gpt2):
    x = prompts(lengths=(3, 7))
    np.testing.assert_array_equal(greedy(x), np_greedy(gpt2, x, STEPS))


def test_top_k_samples_keep_the_k_best_and_follow_the_seed(gpt2):
    x = {key: np.repeat(value[1:2], 64, axis=0) for key, value in prompts().items()}
    text = x["token_ids"][0][x["padding_mask"][0] == 1]
    log_p = log_probabilities(gpt2, text)
    generator = CausalLMGenerator(gpt2, max_new_tokens=1, strategy="sample", temperature=6.0,
                                  top_k=3, seed=5)
    state = keras.ops.convert_to_numpy(generator.seed_generator.state)
    samples = generator(x)[:, 0]
    assert set(samples) <= set(np.argsort(-log_p)[:3]) and len(set(samples)) > 1
    generator.seed_generator.state.assign(state)
    np.testing.assert_array_equal(generator(x)[:, 0], samples)


def test_beam_search_finds_the_exact_best_continuation():
    # With as many beams as continuations of length steps-1, beam search is exhaustive.
    vocabulary, steps = 4, 3
    gpt2 = model(vocabulary, scale=2.0)
    x = prompts(lengths=(3, 1), vocabulary_size=vocabulary)
    generated = CausalLMGenerator(gpt2, max_new_tokens=steps, strategy="beam",
                                  num_beams=vocabulary ** (steps - 1), length_penalty=0.0)(x)
    for row in range(2):
        text = list(x["token_ids"][row][x["padding_mask"][row] == 1])
        scores = functools.lru_cache(maxsize=None)(
            lambda prefix, text=text: log_probabilities(gpt2, text + list(prefix)))
        best, best_score = None, -np.inf
        for sequence in itertools.product(range(vocabulary), repeat=steps):
            end = sequence.index(END) if END in sequence else None
            if end is not None and any(sequence[end + 1 :]):
                continue  # after the end id only padding, at no cost
            scored = steps if end is None else end + 1
            score = sum(scores(sequence[:i])[sequence[i]] for i in range(scored))  # each prefix scored once
            if score > best_score:
                best, best_score = list(sequence), score
        assert generated[row].tolist() == best


def test_errors(gpt2):
    with pytest.raises(ValueError, match="padded on the left"):
        CausalLMGenerator(gpt2)({"token_ids": np.ones((1, 3), "int32"),
                                 "padding_mask": np.array([[1, 1, 0]], "int32")})
    with pytest.raises(ValueError, match="positions"):
        CausalLMGenerator(gpt2, max_new_tokens=20)(prompts())
    with pytest.raises(ValueError, match="lack"):
        CausalLMGenerator(gpt2)({"token_ids": np.ones((1, 2), "int32")})
    with pytest.raises(ValueError, match="token_ids 30 is outside the valid range"):
        CausalLMGenerator(gpt2)({"token_ids": [[30]], "padding_mask": [[1]]})
    with pytest.raises(ValueError, match="must all be"):
        CausalLMGenerator(gpt2)({"token_ids": np.ones((1, 2), "int32"),
                                 "padding_mask": np.ones((1, 3), "int32")})
    with pytest.raises(ValueError, match="decoder-only backbone"):
        CausalLMGenerator(keras.layers.Dense(2))
    with pytest.raises(ValueError, match="strategy must be one of"):
        CausalLMGenerator(gpt2, strategy="nucleus")

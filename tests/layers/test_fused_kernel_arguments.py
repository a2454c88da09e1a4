"""The fused attention kernel is reachable: no mask tensor when nothing is padded, `is_causal` for a causal one.

Under `mixed_bfloat16`, PyTorch's `scaled_dot_product_attention` takes its
flash kernel only for bf16 inputs without an `attn_mask`; on a GPU, Keras'
JAX `dot_product_attention` picks cuDNN's flash kernel only where JAX's
checks pass, which a `(batch, 1, 1, keys)` padding bias fails (cuDNN takes
a bias of the scores' full length). On PyTorch the SDPA calls, on JAX the
`jax.nn.dot_product_attention` calls, are intercepted and their arguments
checked; on every backend, a model called with its padding masks left out
(nothing padded) gives the outputs of the masked path with masks of ones.
"""

import contextlib

import keras
import numpy as np
import pytest
from helpers import BACKEND

import kbert
from kbert.backend.ops import dtype_name
from kbert.generation import CausalLMGenerator

BATCH, LENGTH = 2, 6


@contextlib.contextmanager
def sdpa_calls():
    """The list of `(query dtype name, mask or bias, is_causal)` of each fused attention call made
    inside: PyTorch's SDPA, JAX's `jax.nn.dot_product_attention` (nothing on TensorFlow)."""
    calls = []
    if BACKEND == "jax":
        with _jax_attention_calls(calls):
            yield calls
        return
    if BACKEND != "torch":
        yield calls
        return
    import torch

    original = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append((dtype_name(query), attn_mask, is_causal))
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = recording
    try:
        yield calls
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


@contextlib.contextmanager
def _jax_attention_calls(calls, arrays=None):
    """Records JAX's attention calls in `calls` as `sdpa_calls` does; `(query, key, value,
    bias)` in `arrays` too when given."""
    import jax

    original = jax.nn.dot_product_attention

    def recording(query, key, value, bias=None, mask=None, *, is_causal=False, **kwargs):
        calls.append((dtype_name(query), mask if bias is None else bias, is_causal))
        if arrays is not None:
            arrays.append((query, key, value, bias))
        return original(query, key, value, bias, mask, is_causal=is_causal, **kwargs)

    jax.nn.dot_product_attention = recording
    try:
        yield
    finally:
        jax.nn.dot_product_attention = original


def _ids(vocabulary, shape=(BATCH, LENGTH)):
    return np.random.default_rng(0).integers(3, vocabulary, shape).astype("int32")


def _encoder():
    return kbert.models.Encoder(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16,
                                intermediate_dim=32, max_positions=16, dropout=0.0,
                                dtype="mixed_bfloat16")


def _gpt2():
    return kbert.models.GPT2(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16,
                             intermediate_dim=32, max_positions=32, dropout=0.0, end_id=0,
                             dtype="mixed_bfloat16")


def _bart():
    return kbert.models.BART(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=16,
                             intermediate_dim=32, max_positions=16, dropout=0.0,
                             dtype="mixed_bfloat16")


# name -> (model maker, inputs without masks, the masks of ones, the output compared,
#          the `is_causal` flags expected, one per SDPA call)
CASES = {
    "encoder": (_encoder, {"token_ids": _ids(30), "segment_ids": np.zeros((BATCH, LENGTH), "int32")},
                ("padding_mask",), "sequence_output", [False] * 2),
    "gpt2": (_gpt2, {"token_ids": _ids(30)}, ("padding_mask",), "logits", [True] * 2),
    "bart": (_bart, {"encoder_token_ids": _ids(30), "decoder_token_ids": _ids(30, (BATCH, 4))},
             ("encoder_padding_mask", "decoder_padding_mask"), "logits",
             [False, True, False]),  # encoder self, decoder self (causal), cross
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nothing_padded_reaches_the_kernel_without_a_mask(name):
    make, inputs, masks, output, causal = CASES[name]
    keras.utils.set_random_seed(0)
    model = make()
    ones = {mask: np.ones_like(inputs[mask.replace("padding_mask", "token_ids")]) for mask in masks}
    with sdpa_calls() as calls:
        unpadded = model(inputs)[output]
    masked = model({**inputs, **ones})[output]
    if BACKEND in ("torch", "jax"):
        assert [call[0] for call in calls] == ["bfloat16"] * len(causal)
        assert [call[1] for call in calls] == [None] * len(causal), "a mask tensor was passed"
        assert [call[2] for call in calls] == causal
    as_float = lambda x: keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))  # noqa: E731
    np.testing.assert_allclose(as_float(unpadded), as_float(masked), atol=2e-2, rtol=2e-2)


def test_an_unpadded_prompt_fills_the_cache_with_is_causal():
    """GPT-2's prompt goes through the kernel's causal flag; the decoding steps (a cache with
    positions not written yet) keep their mask; the tokens are those of the uncached loop."""
    keras.utils.set_random_seed(0)
    model = _gpt2()
    prompt = {"token_ids": _ids(30), "padding_mask": np.ones((BATCH, LENGTH), "int32")}
    with sdpa_calls() as calls:
        cached = CausalLMGenerator(model, max_new_tokens=3)(prompt)
    uncached = CausalLMGenerator(model, max_new_tokens=3, use_cache=False)(prompt)
    np.testing.assert_array_equal(cached, uncached)
    if BACKEND == "torch":  # JAX's compiled loop fills a cache of the full length, masked
        prompt_calls, step_calls = calls[:2], calls[2:]
        assert all(mask is None and is_causal for _, mask, is_causal in prompt_calls)
        assert step_calls and all(mask is not None for _, mask, _ in step_calls)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's cuDNN checks")
def test_a_padded_batch_reaches_jax_with_a_bias_cudnn_takes():
    """With keys padded, the bias passes JAX's cuDNN layout check (the scores' full lengths), which
    Keras' JAX `dot_product_attention` asks before it takes the flash kernel on a GPU."""
    from jax._src.cudnn.fused_attention_stablehlo import AttentionLayout, check_layout

    keras.utils.set_random_seed(0)
    inputs = dict(CASES["encoder"][1], padding_mask=np.array([[1] * LENGTH, [1] * 4 + [0] * 2], "int32"))
    calls, arrays = [], []
    with _jax_attention_calls(calls, arrays):
        _encoder()(inputs)
    assert len(arrays) == 2
    for query, key, value, bias in arrays:
        assert bias is not None and bias.shape == (BATCH, 1, LENGTH, LENGTH)
        check_layout(query, key, value, bias, None, None, None, None, None, None,
                     AttentionLayout.BTNH)

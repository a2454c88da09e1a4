"""Backend-aware helpers for the tests (the one place the tests branch on backend).

Besides the XLA and comparison helpers, this module holds the layer-test
harness (`LayerCase`, `run_standard_check`) that every `tests/layers` file uses
for the checks docs/architecture.md §10 lists for each layer, and the small NumPy references
(LayerNorm, exact and tanh GELU, multi-head attention) that several layer tests
share. The references are written from the formulas in docs/algorithms.md, never
from kbert code.
"""

import dataclasses
import json
import math
from typing import Any
from collections.abc import Callable

import keras
import numpy as np
import pytest

from kbert.backend.ops import dtype_name

BACKEND = keras.backend.backend()


def compile_with_xla(fn):
    """Wrap `fn` in the backend's XLA compiler: `tf.function(jit_compile=True)` or `jax.jit`.

    PyTorch has no XLA path on this machine; the caller's test is skipped there.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    pytest.skip("XLA compilation applies to the TensorFlow and JAX backends only.")


def _is_array(x):
    return isinstance(x, np.ndarray) or keras.ops.is_tensor(x)


def xla_call(layer, *args, **kwargs):
    """Call a built layer through XLA and return NumPy outputs.

    Positional arguments and array-valued keyword arguments (masks, positions)
    are traced inputs of the compiled function; other keyword arguments
    (`training`, `reverse`) are static. On JAX the layer runs statelessly
    (`stateless_call`) inside `jax.jit`.
    """
    tensor_kwargs = {k: v for k, v in kwargs.items() if _is_array(v)}
    static_kwargs = {k: v for k, v in kwargs.items() if k not in tensor_kwargs}
    if BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def fn(trainable, non_trainable, args, tensor_kwargs):
            outputs, _ = layer.stateless_call(
                trainable, non_trainable, *args, **tensor_kwargs, **static_kwargs
            )
            return outputs

        outputs = jax.jit(fn)(trainable, non_trainable, args, tensor_kwargs)
    else:
        compiled = compile_with_xla(
            lambda args, tensor_kwargs: layer(*args, **tensor_kwargs, **static_kwargs)
        )
        outputs = compiled(args, tensor_kwargs)
    return keras.tree.map_structure(keras.ops.convert_to_numpy, outputs)


def input_gradient(fn, x):
    """NumPy gradient of `sum(fn(x))` with respect to the float input `x`, by the backend's autodiff."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(fn(x))
        return tape.gradient(total, x).numpy()
    if BACKEND == "jax":
        import jax

        # Compiled: one trace instead of one dispatch per primitive.
        return np.asarray(jax.jit(jax.grad(lambda x: fn(x).sum()))(keras.ops.convert_to_tensor(x)))
    import torch

    x = torch.tensor(np.asarray(x), requires_grad=True)
    fn(x).sum().backward()
    return x.grad.numpy()


def to_numpy(x):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, x)


def to_float32_numpy(x):
    """NumPy float32 copy of a tensor of any float dtype (bfloat16 included)."""
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def assert_close(actual, expected, atol=1e-5, rtol=0.0):
    """Compare tensors or matching structures (dicts, lists) of tensors."""
    keras.tree.map_structure(
        lambda a, e: np.testing.assert_allclose(a, e, atol=atol, rtol=rtol),
        to_numpy(actual),
        to_numpy(expected),
    )


# ---------------------------------------------------------------------------
# NumPy references (float64 inside; formulas from docs/algorithms.md §1).
# ---------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_gelu(x):
    """Exact GELU: `0.5·x·(1 + erf(x/√2))` (Hugging Face "gelu")."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_gelu_tanh(x):
    """tanh GELU: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Hugging Face "gelu_new")."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def np_layer_norm(x, gamma, beta, epsilon=1e-12):
    """LayerNorm over the last axis with biased variance."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def np_dense(x, kernel, bias=None):
    y = np.asarray(x, np.float64) @ np.asarray(kernel, np.float64)
    return y if bias is None else y + bias


def np_softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def np_attention_mask(batch, query_length, key_length, padding_mask=None, attention_mask=None):
    """Bool `(batch, query, key)`: True where a query may attend to a key."""
    mask = np.ones((batch, query_length, key_length), bool)
    if padding_mask is not None:
        mask &= np.asarray(padding_mask).astype(bool)[:, None, :]
    if attention_mask is not None:
        mask &= np.asarray(attention_mask).astype(bool)
    return mask


def np_multi_head_attention(
    query, value, weights, num_heads, key_dim, value_dim=None, mask=None, scale=None, bias=None
):
    """Multi-head attention with `1/sqrt(key_dim)` scaling and masked keys removed.

    Args:
        query: `(batch, q, width)`; value: `(batch, k, width)` (also the key input).
        weights: dict of `query`, `key`, `value`, `output` -> `(kernel, bias)`.
        mask: bool `(batch, q, k)`; False keys get zero probability.
        bias: added to the scaled scores `(batch, heads, q, k)` (broadcast).
    """
    value_dim = value_dim or key_dim
    batch, q_len, _ = query.shape
    k_len = value.shape[1]
    q = np_dense(query, *weights["query"]).reshape(batch, q_len, num_heads, key_dim)
    k = np_dense(value, *weights["key"]).reshape(batch, k_len, num_heads, key_dim)
    v = np_dense(value, *weights["value"]).reshape(batch, k_len, num_heads, value_dim)
    scale = 1.0 / math.sqrt(key_dim) if scale is None else scale
    scores = np.einsum("bqnh,bknh->bnqk", q, k) * scale
    if bias is not None:
        scores = scores + np.asarray(bias, np.float64)
    if mask is not None:
        scores = np.where(np.asarray(mask, bool)[:, None, :, :], scores, -np.inf)
    probabilities = np_softmax(scores, axis=-1)
    context = np.einsum("bnqk,bknh->bqnh", probabilities, v)
    context = context.reshape(batch, q_len, num_heads * value_dim)
    return np_dense(context, *weights["output"])


def np_itc_pattern(plan, length, block):
    """BigBird's per-head bool pattern `(heads, n, n)` from the ITC pattern of docs/algorithms.md §12.

    `plan[h, i - 1]` lists the random key blocks of query block `i`; blocks 0
    and nb-1 are global; every other block sees {0, nb-1, i-1, i, i+1} and its
    random blocks.
    """
    heads, num_blocks = plan.shape[0], plan.shape[1] + 2
    blocks = np.zeros((heads, num_blocks, num_blocks), bool)
    for head in range(heads):
        for i in range(num_blocks):
            if i in (0, num_blocks - 1):
                blocks[head, i, :] = True  # global rows
                continue
            keys = {0, num_blocks - 1, i - 1, i, i + 1} | set(plan[head, i - 1].tolist())
            blocks[head, i, sorted(keys)] = True
    dense = blocks.repeat(block, axis=1).repeat(block, axis=2)
    return dense[:, :length, :length]


def dense_weights(dense_layer):
    """`(kernel, bias)` of a Keras Dense layer as NumPy (bias `None` when absent)."""
    kernel = to_numpy(dense_layer.kernel)
    bias = to_numpy(dense_layer.bias) if dense_layer.use_bias else None
    return kernel, bias


def attention_weights(attention):
    """The projection weights of a kbert `MultiHeadAttention`, for `np_multi_head_attention`."""
    return {
        name: dense_weights(getattr(attention, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }


def np_rms_norm(x, scale, epsilon=1e-6):
    """T5's RMS normalization: `scale·x / √(mean(x²) + ε)` (no mean subtracted)."""
    x = np.asarray(x, np.float64)
    return scale * x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon)


def np_t5_block(block, x, memory=None, padding=None, memory_padding=None, bias=None, causal=False):
    """T5's pre-RMSNorm block (docs/algorithms.md §8) with the weights of a kbert T5 block.

    No biases and unscaled scores; `bias` goes to self-attention, `causal`
    masks its future keys, and with `memory` a cross-attention branch follows it.
    The block's switches are followed too: post-norm, LayerNorm, biases and
    `1/sqrt(d)` scores make it BART's block (docs/algorithms.md §10).
    """
    heads, key_dim = block.self_attention.num_heads, block.self_attention.key_dim
    batch, length, _ = x.shape

    def norm(layer, y):
        if block.normalization == "layer":
            return np_layer_norm(y, to_numpy(layer.gamma), to_numpy(layer.beta), block.layer_norm_epsilon)
        return np_rms_norm(y, to_numpy(layer.scale), block.layer_norm_epsilon)

    def residual(y, layer, sublayer):
        if block.normalize_first:
            return y + sublayer(norm(layer, y))
        return norm(layer, y + sublayer(y))

    def attention(attention_layer, value, mask, score_bias=None):
        return lambda h: np_multi_head_attention(
            h, h if value is None else value, attention_weights(attention_layer), heads, key_dim,
            mask=mask, scale=block.attention_scale, bias=score_bias,
        )

    causal_mask = np.tril(np.ones((length, length), bool))[None] if causal else None
    mask = np_attention_mask(batch, length, length, padding, causal_mask)
    x = residual(x, block.self_attention_layer_norm, attention(block.self_attention, None, mask, bias))
    if memory is not None:
        mask = np_attention_mask(batch, length, memory.shape[1], memory_padding)
        x = residual(x, block.cross_attention_layer_norm, attention(block.cross_attention, memory, mask))
    activation = {"relu": lambda y: np.maximum(y, 0.0), "gelu_approximate": np_gelu_tanh, "gelu": np_gelu}

    def feed_forward(h):
        hidden = activation[block.activation](np_dense(h, *dense_weights(block.intermediate_dense)))
        if block.use_gated_activation:
            hidden = hidden * np_dense(h, *dense_weights(block.gate_dense))
        return np_dense(hidden, *dense_weights(block.output_dense))

    return residual(x, block.ffn_layer_norm, feed_forward)


# ---------------------------------------------------------------------------
# Layer-test harness.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class LayerCase:
    """One layer configuration and the inputs the standard checks feed it.

    Attributes:
        make_layer: returns a fresh, unbuilt layer. It must not pass `dtype`,
            so that the layer picks up the global dtype policy.
        inputs: NumPy inputs, batch first, by call-argument name; the first
            entry is passed positionally, the others as keyword arguments.
        expected_shape: shape of the eager output for `inputs`.
        call_kwargs: static call arguments (e.g. `{"reverse": True}`).
        rebuild: `(layer, config) -> layer` for the config round trip; the
            default is `type(layer).from_config(config)`.
        make_model: `case -> keras.Model` for the fit and `.keras` checks; the
            default is `functional_model(case)`.
        mixed_tolerance: bound, relative to the float32 output's largest
            magnitude, on the difference between the float32 output and the
            `mixed_float16` / `mixed_bfloat16` output of the same weights.
    """

    make_layer: Callable[[], keras.layers.Layer]
    inputs: dict
    expected_shape: tuple
    call_kwargs: dict = dataclasses.field(default_factory=dict)
    rebuild: Callable[[Any, dict], Any] | None = None
    make_model: Callable[["LayerCase"], keras.Model] | None = None
    mixed_tolerance: dict = dataclasses.field(
        default_factory=lambda: {"mixed_bfloat16": 0.05, "mixed_float16": 0.01}
    )

    def call(self, layer, inputs, **kwargs):
        """Call `layer` on `inputs` (a dict shaped like `self.inputs`)."""
        names = list(self.inputs)
        keyword = {name: inputs[name] for name in names[1:]}
        return layer(inputs[names[0]], **keyword, **self.call_kwargs, **kwargs)

    def symbolic_inputs(self):
        return {
            name: keras.Input(shape=array.shape[1:], dtype=str(array.dtype), name=name)
            for name, array in self.inputs.items()
        }


def functional_model(case, layer=None):
    """A functional model with the case's inputs (by name) and the layer's output."""
    inputs = case.symbolic_inputs()
    layer = case.make_layer() if layer is None else layer
    return keras.Model(inputs, case.call(layer, inputs))


def _json_normalized(config):
    return json.loads(json.dumps(config))


def check_config_round_trip(case):
    """`from_config(get_config())`: same config (through JSON), same outputs with the same weights."""
    layer = case.make_layer()
    expected = to_numpy(case.call(layer, case.inputs))
    cls = type(layer)
    registered = keras.saving.get_registered_name(cls)
    assert keras.saving.get_registered_object(registered) is cls, f"{cls} is not registered"

    config = _json_normalized(layer.get_config())
    clone = case.rebuild(layer, config) if case.rebuild else cls.from_config(config)
    assert type(clone) is cls
    assert _json_normalized(clone.get_config()) == config

    case.call(clone, case.inputs)  # build
    weights = layer.get_weights()
    assert [w.shape for w in clone.get_weights()] == [w.shape for w in weights]
    clone.set_weights(weights)
    np.testing.assert_allclose(to_numpy(case.call(clone, case.inputs)), expected, atol=1e-6, rtol=0)


def check_symbolic_and_eager(case):
    """Symbolic call on `keras.Input`s (batch unknown) and eager call: shapes and dtypes."""
    layer = case.make_layer()
    symbolic = case.call(layer, case.symbolic_inputs())
    assert tuple(symbolic.shape) == (None,) + tuple(case.expected_shape[1:])
    assert dtype_name(symbolic) == layer.compute_dtype

    outputs = case.call(layer, case.inputs)
    assert tuple(outputs.shape) == tuple(case.expected_shape)
    assert dtype_name(outputs) == layer.compute_dtype
    assert np.all(np.isfinite(to_numpy(outputs)))


def check_fit_step(case):
    """One optimizer step in a functional model: finite loss, every trainable variable moves.

    Keras' default `jit_compile="auto"`: one XLA program on JAX (an eager JAX step compiles each
    operation of the forward and backward pass alone: a layer's step took four times as long),
    a graph without XLA on TensorFlow on a CPU, eager on PyTorch.
    """
    model = case.make_model(case) if case.make_model else functional_model(case)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2), loss="mse")
    rng = np.random.default_rng(1)
    target = rng.normal(size=case.expected_shape).astype("float32")
    assert model.trainable_variables, "nothing to train"
    before = [to_numpy(v) for v in model.trainable_variables]
    batch = case.expected_shape[0]
    history = model.fit(case.inputs, target, batch_size=batch, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1
    assert np.isfinite(history.history["loss"][0])
    unchanged = [
        v.path
        for v, old in zip(model.trainable_variables, before)
        if np.array_equal(to_numpy(v), old)
    ]
    assert not unchanged, f"trainable variables not updated by the step: {unchanged}"


def check_dtype_policy(case, policy):
    """Built under a mixed policy: runs, compute-dtype outputs close to float32, float32 variables."""
    reference_layer = case.make_layer()
    expected = to_numpy(case.call(reference_layer, case.inputs))
    weights = reference_layer.get_weights()

    keras.config.set_dtype_policy(policy)  # conftest restores float32
    layer = case.make_layer()
    compute_dtype = keras.dtype_policies.get(policy).compute_dtype
    assert layer.compute_dtype == compute_dtype
    case.call(layer, case.inputs)  # build
    layer.set_weights(weights)
    outputs = case.call(layer, case.inputs)
    assert dtype_name(outputs) == compute_dtype
    assert layer.weights
    for variable in layer.weights:
        assert dtype_name(variable) == "float32", variable.path
    actual = to_float32_numpy(outputs)
    assert np.all(np.isfinite(actual))
    scale = max(1.0, float(np.abs(expected).max()))
    tolerance = case.mixed_tolerance[policy] * scale
    np.testing.assert_allclose(actual, expected, atol=tolerance, rtol=0)

    symbolic = case.call(layer, case.symbolic_inputs())
    assert dtype_name(symbolic) == compute_dtype


def check_xla(case):
    """The XLA-compiled call equals the eager call (atol 1e-5)."""
    layer = case.make_layer()
    expected = to_numpy(case.call(layer, case.inputs))
    names = list(case.inputs)
    keyword = {name: case.inputs[name] for name in names[1:]}
    compiled = xla_call(layer, case.inputs[names[0]], **keyword, **case.call_kwargs)
    np.testing.assert_allclose(compiled, expected, atol=1e-5, rtol=0)


def check_save_load(case, tmp_path):
    """`.keras` save and load inside a model: identical outputs and weights."""
    model = case.make_model(case) if case.make_model else functional_model(case)
    expected = to_numpy(model(case.inputs))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    for old, new in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(to_numpy(new), to_numpy(old), err_msg=old.path)
    assert len(loaded.weights) == len(model.weights)
    np.testing.assert_array_equal(to_numpy(loaded(case.inputs)), expected)


STANDARD_CHECKS = (
    "config_round_trip",
    "symbolic_and_eager",
    "fit_step",
    "mixed_bfloat16",
    "mixed_float16",
    "xla",
    "save_load",
)


def run_standard_check(check, case, tmp_path):
    """Run one of `STANDARD_CHECKS` on a `LayerCase`.

    Layer test files parametrize one test over `STANDARD_CHECKS` and their cases:

        @pytest.mark.parametrize("check", STANDARD_CHECKS)
        @pytest.mark.parametrize("case_name", sorted(CASES))
        def test_standard(check, case_name, tmp_path):
            run_standard_check(check, CASES[case_name](), tmp_path)
    """
    if check == "config_round_trip":
        check_config_round_trip(case)
    elif check == "symbolic_and_eager":
        check_symbolic_and_eager(case)
    elif check == "fit_step":
        check_fit_step(case)
    elif check in ("mixed_bfloat16", "mixed_float16"):
        check_dtype_policy(case, check)
    elif check == "xla":
        check_xla(case)
    elif check == "save_load":
        check_save_load(case, tmp_path)
    else:
        raise ValueError(f"Unknown check {check!r}; known: {STANDARD_CHECKS}.")


def random_ids(rng, shape, high):
    return rng.integers(0, high, size=shape).astype("int32")


def random_floats(rng, shape, scale=1.0):
    return (scale * rng.normal(size=shape)).astype("float32")


def padding_mask(lengths, sequence_length):
    """0/1 int32 `(batch, sequence)` with the first `lengths[i]` positions real."""
    return (np.arange(sequence_length)[None, :] < np.asarray(lengths)[:, None]).astype("int32")

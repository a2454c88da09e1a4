"""LongformerAttention: equals dense attention with the sliding-window + global mask.

The reference is written here in NumPy from docs/algorithms.md §13: a local query i
attends to real keys j with |i - j| <= w·dilation and (i - j) % dilation == 0,
and to every global key, with the local projections; a global query attends to
every real key with query_global / key_global / value_global.
"""

import keras
import numpy as np
import pytest
from helpers import (
    BACKEND,
    STANDARD_CHECKS,
    LayerCase,
    dense_weights,
    input_gradient,
    np_dense,
    np_softmax,
    padding_mask,
    random_floats,
    run_standard_check,
    to_float32_numpy,
    to_numpy,
    xla_call,
)
from keras import ops

from kbert.layers import LongformerAttention, sparse_attention

BATCH, HIDDEN, HEADS, KEY_DIM, WINDOW = 2, 8, 2, 4, 3
LENGTH = 13  # not a multiple of the window: padded inside the layer
PROJECTIONS = ("query", "key", "value", "query_global", "key_global", "value_global", "output")


def make_layer(**kwargs):
    # Two global slots in every test: one set of shapes, compiled once per backend.
    kwargs = {"window": WINDOW, "max_global_tokens": 2, "bias_initializer": "random_normal", **kwargs}
    return LongformerAttention(HEADS, KEY_DIM, **kwargs)


def global_mask(positions, length=LENGTH):
    """0/1 int32 `(batch, length)` with 1 at `positions[b]`."""
    mask = np.zeros((len(positions), length), "int32")
    for row, columns in enumerate(positions):
        mask[row, list(columns)] = 1
    return mask


def case():
    # No attention dropout: on JAX its random bits triple the compile time of
    # the fit step (the inherited dense kernel applies the dropout layer).
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=make_layer,
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "padding_mask": padding_mask([LENGTH, 9], LENGTH),
            "global_attention_mask": global_mask([[0, 7], [1]]),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


# The layer's one XLA compile is in test_more_global_tokens_than_the_limit,
# checked against the NumPy reference rather than the eager call.
@pytest.mark.parametrize("check", [c for c in STANDARD_CHECKS if c != "xla"])
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


def weights_of(layer):
    return {name: dense_weights(getattr(layer, f"{name}_dense")) for name in PROJECTIONS}


def np_longformer(layer, x, padding=None, global_positions=None, dilations=None,
                  with_probabilities=False):
    """NumPy reference; `global_positions[b]` lists the global tokens of sequence b.

    With `with_probabilities`, also the dense `(batch, heads, n, n)` probabilities:
    the global projections' rows for global tokens, the window's for the others."""
    weights = weights_of(layer)
    batch, n, _ = x.shape
    dilations = dilations or [1] * HEADS
    real = np.ones((batch, n), bool) if padding is None else padding.astype(bool)
    is_global = np.zeros((batch, n), bool)
    if global_positions is not None:
        for row, columns in enumerate(global_positions):
            is_global[row, list(columns)] = True
    is_global &= real
    x = x.astype(np.float64)

    def heads(name):
        return np_dense(x, *weights[name]).reshape(batch, n, HEADS, KEY_DIM)

    def attention(suffix, mask):
        scores = np.einsum("bqnh,bknh->bnqk", heads("query" + suffix), heads("key" + suffix))
        probabilities = np_softmax(np.where(mask, scores / np.sqrt(KEY_DIM), -np.inf))
        return np.einsum("bnqk,bknh->bqnh", probabilities, heads("value" + suffix)), probabilities

    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    window = np.stack([(np.abs(distance) <= WINDOW * d) & (distance % d == 0) for d in dilations])
    local_mask = (window[None] | is_global[:, None, None, :]) & real[:, None, None, :]
    context, probabilities = attention("", local_mask)
    if global_positions is not None:
        global_context, global_probabilities = attention(
            "_global", np.broadcast_to(real[:, None, None, :], local_mask.shape))
        context = np.where(is_global[:, :, None, None], global_context, context)
        probabilities = np.where(is_global[:, None, :, None], global_probabilities, probabilities)
    outputs = np_dense(context.reshape(batch, n, HEADS * KEY_DIM), *weights["output"])
    return (outputs, probabilities) if with_probabilities else outputs


@pytest.mark.parametrize(
    "length, dilation, lengths, global_positions",
    [
        (LENGTH, 2, [LENGTH, 9], None),  # no global tokens; padded inside the layer, dilated
        (LENGTH, 1, [LENGTH, 9], [[0], [0, 5]]),  # CLS-like globals
        (LENGTH, [1, 2], None, [[0, 12], []]),  # dilation per head; a row with no global
        (3, 1, [3, 2], [[1], [0]]),  # shorter than the window: full attention
    ],
)
def test_equals_dense_attention_with_the_window_and_global_mask(
    length, dilation, lengths, global_positions
):
    rng = np.random.default_rng(length)
    layer = make_layer(dilation=dilation)
    x = random_floats(rng, (BATCH, length, HIDDEN))
    padding = None if lengths is None else padding_mask(lengths, length)
    kwargs = {"padding_mask": padding}
    if global_positions is not None:
        kwargs["global_attention_mask"] = global_mask(global_positions, length)
    else:
        layer(x)  # builds the global projections, unused without global tokens
    outputs = to_numpy(layer(x, **kwargs))
    dilations = layer.head_dilations
    expected = np_longformer(layer, x, padding, global_positions, dilations)
    # A padding query whose window holds no real key has no dense reference.
    real = np.ones((BATCH, length), bool) if padding is None else padding.astype(bool)
    np.testing.assert_allclose(outputs[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "dilation, global_positions",
    [(2, None), (1, [[0], [0, 5]]), ([1, 2], [[0, 12], []])],
)
def test_probabilities_are_the_dense_map_of_the_window_and_global_tokens(dilation, global_positions):
    """Asked for, the probabilities come as a dense map equal to the NumPy reference (0 outside
    the window and the global tokens), and the outputs stay those of the sparse kernel."""
    rng = np.random.default_rng(3)
    layer = make_layer(dilation=dilation)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    kwargs = {"padding_mask": padding_mask([LENGTH, 9], LENGTH)}
    if global_positions is not None:
        kwargs["global_attention_mask"] = global_mask(global_positions)
    outputs, probabilities = to_numpy(layer(x, **kwargs, return_probabilities=True))
    with np.errstate(invalid="ignore"):  # padding queries with no real key: NaN rows, not compared
        expected_outputs, expected_probabilities = np_longformer(
            layer, x, kwargs["padding_mask"], global_positions, layer.head_dilations,
            with_probabilities=True)
    real = kwargs["padding_mask"].astype(bool)  # a padding query may see no real key in its window
    np.testing.assert_allclose(probabilities.transpose(0, 2, 1, 3)[real],
                               expected_probabilities.transpose(0, 2, 1, 3)[real], atol=1e-6, rtol=0)
    np.testing.assert_allclose(outputs[real], expected_outputs[real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs[real], to_numpy(layer(x, **kwargs))[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("group_queries", [1024, WINDOW])
def test_gradients_equal_dense_attention_with_the_same_mask(group_queries, monkeypatch):
    # WINDOW: one block per query group, so the blocks run in a loop (ops.map).
    monkeypatch.setattr(sparse_attention, "GROUP_QUERIES", group_queries)
    rng = np.random.default_rng(1)
    layer = make_layer(dilation=[1, 2])
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask([LENGTH, 9], LENGTH)
    globals_ = global_mask([[0, 7], [1]])
    layer(x, padding_mask=padding, global_attention_mask=globals_)
    weights = {k: [ops.convert_to_tensor(w) for w in v] for k, v in weights_of(layer).items()}
    real = padding.astype(bool)
    is_global = globals_.astype(bool) & real
    distance = np.arange(LENGTH)[:, None] - np.arange(LENGTH)[None, :]
    window = np.stack([(np.abs(distance) <= WINDOW * d) & (distance % d == 0) for d in (1, 2)])
    local_mask = ops.convert_to_tensor((window[None] | is_global[:, None, None, :]) & real[:, None, None, :])
    global_rows = ops.convert_to_tensor(is_global[:, :, None, None])
    key_mask = ops.convert_to_tensor(real[:, None, None, :])
    # Only real rows: padding rows whose window has no real key have no dense value.
    probe = ops.convert_to_tensor(random_floats(rng, (BATCH, LENGTH, HIDDEN)) * real[:, :, None])

    def dense(x):  # dense masked attention in keras.ops, independent of kbert
        def heads(name):
            kernel, bias = weights[name]
            return ops.reshape(ops.matmul(x, kernel) + bias, (BATCH, LENGTH, HEADS, KEY_DIM))

        def attention(suffix, mask):
            scores = ops.einsum("bqnh,bknh->bnqk", heads("query" + suffix), heads("key" + suffix))
            probabilities = ops.softmax(ops.where(mask, scores / np.sqrt(KEY_DIM), -1e9), axis=-1)
            return ops.einsum("bnqk,bknh->bqnh", probabilities, heads("value" + suffix))

        context = ops.where(global_rows, attention("_global", key_mask), attention("", local_mask))
        context = ops.reshape(context, (BATCH, LENGTH, HEADS * KEY_DIM))
        return (ops.matmul(context, weights["output"][0]) + weights["output"][1]) * probe

    def sparse(x):
        return layer(x, padding_mask=padding, global_attention_mask=globals_) * probe

    expected = input_gradient(dense, x)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(input_gradient(sparse, x), expected, atol=1e-5, rtol=0)


def test_query_groups_in_a_loop_equal_the_reference(monkeypatch):
    # Groups of two blocks: 13 tokens are padded to 3 groups of 2 blocks of 3 (dilation 1)
    # and 2 groups of 2 blocks of 6 (dilation 2); the groups run in ops.map.
    monkeypatch.setattr(sparse_attention, "GROUP_QUERIES", 2 * WINDOW)
    rng = np.random.default_rng(5)
    layer = make_layer(dilation=[1, 2])
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask([LENGTH, 9], LENGTH)
    globals_ = [[0, 7], [1]]
    expected = None
    calls = [lambda: to_numpy(layer(x, padding_mask=padding, global_attention_mask=global_mask(globals_)))]
    if BACKEND != "torch":
        calls.append(
            lambda: xla_call(layer, x, padding_mask=padding, global_attention_mask=global_mask(globals_))
        )
    for call in calls:
        outputs = call()
        expected = np_longformer(layer, x, padding, globals_, [1, 2]) if expected is None else expected
        real = padding.astype(bool)
        np.testing.assert_allclose(outputs[real], expected[real], atol=1e-5, rtol=0)


def test_attention_pattern():
    layer = make_layer(dilation=[1, 2])
    pattern = layer.attention_pattern(10, global_positions=[4])
    assert pattern.shape == (HEADS, 10, 10)
    assert pattern[:, 4].all() and pattern[:, :, 4].all()
    np.testing.assert_array_equal(np.nonzero(pattern[0, 0])[0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(np.nonzero(pattern[1, 0])[0], [0, 2, 4, 6])
    np.testing.assert_array_equal(np.nonzero(pattern[1, 9])[0], [3, 4, 5, 7, 9])


def test_more_global_tokens_than_the_limit():
    rng = np.random.default_rng(2)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask([LENGTH, 9], LENGTH)
    many = global_mask([[0, 4, 9], [2]])
    with pytest.raises(ValueError, match="3 global tokens.*max_global_tokens=2"):
        layer(x, padding_mask=padding, global_attention_mask=many)
    if BACKEND == "torch":
        pytest.skip("Only compiled (XLA) calls pass the limit; PyTorch has no XLA path here.")
    # Compiled: the first two are global, the third acts as a local token.
    compiled = xla_call(layer, x, padding_mask=padding, global_attention_mask=many)
    expected = np_longformer(layer, x, padding, [[0, 4], [2]])
    real = padding.astype(bool)
    np.testing.assert_allclose(compiled[real], expected[real], atol=1e-5, rtol=0)


def test_global_tokens_on_padding_are_ignored():
    rng = np.random.default_rng(3)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask([LENGTH, 9], LENGTH)
    with_padding_global = to_numpy(
        layer(x, padding_mask=padding, global_attention_mask=global_mask([[0], [0, 11]]))
    )
    without = to_numpy(layer(x, padding_mask=padding, global_attention_mask=global_mask([[0], [0]])))
    np.testing.assert_allclose(with_padding_global[1, :9], without[1, :9], atol=1e-6, rtol=0)


def test_padding_never_influences_real_positions_in_float16():
    # float16 is where a masking constant would overflow; the exactness tests cover float32.
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(4)
    layer = make_layer()
    mask = padding_mask([LENGTH, 9], LENGTH)
    globals_ = global_mask([[0], [0, 7]])
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    changed = x.copy()
    changed[1, 9:] = random_floats(rng, (LENGTH - 9, HIDDEN), scale=100.0)
    before = to_float32_numpy(layer(x, padding_mask=mask, global_attention_mask=globals_))
    after = to_float32_numpy(layer(changed, padding_mask=mask, global_attention_mask=globals_))
    assert np.all(np.isfinite(after))
    np.testing.assert_allclose(after[1, :9], before[1, :9], atol=1e-6, rtol=0)
    np.testing.assert_allclose(after[0], before[0], atol=1e-6, rtol=0)


def test_global_projections_are_built_and_named():
    layer = make_layer()
    layer.build((1, LENGTH, HIDDEN))
    names = sorted(v.path.split("/")[-2] for v in layer.weights)
    assert names.count("query_global_dense") == 2 and names.count("value_global_dense") == 2
    assert layer.count_params() == 7 * (HIDDEN * HIDDEN + HIDDEN)


def test_bad_arguments_and_inputs_raise():
    with pytest.raises(ValueError, match="window must be a positive integer"):
        LongformerAttention(HEADS, KEY_DIM, window=0)
    with pytest.raises(ValueError, match="one per head"):
        LongformerAttention(HEADS, KEY_DIM, dilation=[1, 2, 3])
    with pytest.raises(ValueError, match="max_global_tokens must be a positive integer"):
        LongformerAttention(HEADS, KEY_DIM, max_global_tokens=0)
    layer = make_layer()
    x = np.zeros((BATCH, LENGTH, HIDDEN), "float32")
    with pytest.raises(ValueError, match="padding_mask.*only"):
        layer(x, attention_mask=np.ones((BATCH, LENGTH, LENGTH), "int32"))
    with pytest.raises(ValueError, match="self-attention only"):
        layer(x, value=x)
    with pytest.raises(ValueError, match=r"global_attention_mask must have shape \(batch, sequence\)"):
        layer(x, global_attention_mask=np.zeros((BATCH, LENGTH, 1), "int32"))

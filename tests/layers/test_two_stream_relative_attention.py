"""TwoStreamRelativeAttention against a NumPy reference written from the XLNet and
Transformer-XL papers: each relative distance's sinusoid computed on its own (no
relative shift), both streams, a permutation mask, memory, padding and segments."""

import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    np_layer_norm,
    np_softmax,
    random_floats,
    run_standard_check,
    to_numpy,
    xla_call,
)

from kbert.layers import TwoStreamRelativeAttention

HEADS, KEY_DIM, HIDDEN, LENGTH = 2, 3, 6, 5


def np_sinusoid(distance, hidden, clamp=-1):
    if clamp > 0:
        distance = max(-clamp, min(clamp, distance))
    frequencies = 1.0 / 10000 ** (np.arange(0, hidden, 2) / hidden)
    return np.concatenate([np.sin(distance * frequencies), np.cos(distance * frequencies)])


def np_stream(layer, stream, keys_in, positions, allowed, mismatch, clamp=-1):
    """One stream's output: rows of `stream` sit at `positions` (absolute, memory counted)."""
    w = {v.name: to_numpy(v) for v in layer.weights}
    q = np.einsum("bih,hnd->bind", stream, w["query_kernel"])
    k = np.einsum("bjh,hnd->bjnd", keys_in, w["key_kernel"])
    v = np.einsum("bjh,hnd->bjnd", keys_in, w["value_kernel"])
    batch, rows = stream.shape[:2]
    scores = np.zeros((batch, HEADS, rows, keys_in.shape[1]))
    for b in range(batch):
        for i in range(rows):
            for j in range(keys_in.shape[1]):
                r = np_sinusoid(positions[b, i] - j, HIDDEN, clamp) @ w["position_kernel"].reshape(HIDDEN, -1)
                r = r.reshape(HEADS, KEY_DIM)
                segment = w["segment_embedding"][int(mismatch[b, i, j])]
                scores[b, :, i, j] = (
                    ((q[b, i] + w["content_bias"]) * k[b, j]).sum(-1)
                    + ((q[b, i] + w["position_bias"]) * r).sum(-1)
                    + ((q[b, i] + w["segment_bias"]) * segment).sum(-1)
                ) / np.sqrt(KEY_DIM)
    scores = np.where(allowed[:, None], scores, -1e9)
    attended = np.einsum("bnij,bjnd->bind", np_softmax(scores), v)
    output = np.einsum("bind,hnd->bih", attended, w["output_kernel"]) + stream
    return np_layer_norm(output, w["gamma"], w["beta"])


def np_two_stream(layer, content, segments, padding, query=None, blocked=None, mapping=None,
                  memory=None, clamp=-1):
    batch = content.shape[0]
    memory_length = 0 if memory is None else memory.shape[1]
    keys_in = content if memory is None else np.concatenate([memory, content], 1)
    key_segments = np.concatenate([np.zeros((batch, memory_length)), segments], 1)
    mismatch = segments[:, :, None] != key_segments[:, None, :]
    real = np.concatenate([np.ones((batch, memory_length)), padding], 1).astype(bool)
    blocked = np.zeros((batch, LENGTH, LENGTH)) if blocked is None else blocked
    allowed = real[:, None, :] & ~np.concatenate(
        [np.zeros((batch, LENGTH, memory_length)), blocked], 2).astype(bool)
    own = np.arange(keys_in.shape[1])[None, :] == np.arange(LENGTH)[:, None] + memory_length
    positions = np.broadcast_to(np.arange(LENGTH) + memory_length, (batch, LENGTH))
    h = np_stream(layer, content, keys_in, positions, allowed | own[None], mismatch, clamp)
    if query is None:
        return h
    at = mapping.argmax(-1)  # the position each query row predicts
    take = lambda x: np.stack([x[b, at[b]] for b in range(batch)])  # noqa: E731
    g = np_stream(layer, query, keys_in, take(positions), take(allowed), take(mismatch), clamp)
    return h, g


def inputs(seed=0, batch=2, memory_length=0):
    rng = np.random.default_rng(seed)
    padding = np.ones((batch, LENGTH), "int32")
    padding[1, :2] = 0
    segments = (np.arange(LENGTH) >= 3).astype("int32")[None].repeat(batch, 0)
    blocked = (rng.random((batch, LENGTH, LENGTH)) < 0.4).astype("float32")
    mapping = np.zeros((batch, 2, LENGTH), "float32")
    mapping[:, 0, 4], mapping[:, 1, 2] = 1, 1
    return dict(
        content=random_floats(rng, (batch, LENGTH, HIDDEN)),
        segment_ids=segments,
        padding_mask=padding,
        query=random_floats(rng, (batch, 2, HIDDEN)),
        permutation_mask=blocked,
        target_mapping=mapping,
        memory=random_floats(rng, (batch, memory_length, HIDDEN)) if memory_length else None,
    )


def make_layer(**options):
    layer = TwoStreamRelativeAttention(
        HEADS, KEY_DIM, kernel_initializer=keras.initializers.RandomNormal(stddev=0.5), **options
    )
    return layer


def case():
    x = inputs()
    return LayerCase(
        make_layer=make_layer,
        inputs={name: x[name] for name in ("content", "segment_ids", "padding_mask")},
        expected_shape=(2, LENGTH, HIDDEN),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


@pytest.mark.parametrize("memory_length", [0, 3])
@pytest.mark.parametrize("clamp", [-1, 2])
def test_both_streams_match_numpy(memory_length, clamp):
    x = inputs(memory_length=memory_length)
    layer = make_layer(clamp_length=clamp)
    h, g = layer(x["content"], x["segment_ids"], x["padding_mask"], query=x["query"],
                 permutation_mask=x["permutation_mask"], target_mapping=x["target_mapping"],
                 memory=x["memory"])
    expected_h, expected_g = np_two_stream(
        layer, x["content"], x["segment_ids"], x["padding_mask"], x["query"],
        x["permutation_mask"], x["target_mapping"], x["memory"], clamp,
    )
    np.testing.assert_allclose(to_numpy(h), expected_h, atol=1e-5)
    np.testing.assert_allclose(to_numpy(g), expected_g, atol=1e-5)


def test_content_stream_alone_matches_numpy_and_compiles():
    x = inputs()
    layer = make_layer()
    args = (x["content"], x["segment_ids"], x["padding_mask"])
    actual = to_numpy(layer(*args))
    np.testing.assert_allclose(actual, np_two_stream(layer, *args), atol=1e-5)
    compiled = xla_call(layer, *args, permutation_mask=x["permutation_mask"])
    eager = layer(*args, permutation_mask=x["permutation_mask"])
    np.testing.assert_allclose(compiled, to_numpy(eager), atol=1e-5)


def test_query_stream_does_not_see_its_own_token():
    """Changing the token at a predicted position leaves that prediction's query row as it is."""
    x = inputs()
    layer = make_layer()
    blocked = np.eye(LENGTH, dtype="float32")[None].repeat(2, 0)  # nothing sees itself
    args = dict(query=x["query"], permutation_mask=blocked, target_mapping=x["target_mapping"])
    _, g = layer(x["content"], x["segment_ids"], x["padding_mask"], **args)
    changed = x["content"].copy()
    changed[:, 4] += 3.0  # the token at prediction 0's position
    h2, g2 = layer(changed, x["segment_ids"], x["padding_mask"], **args)
    np.testing.assert_allclose(to_numpy(g2)[:, 0], to_numpy(g)[:, 0], atol=1e-6)
    assert np.abs(to_numpy(g2)[:, 1] - to_numpy(g)[:, 1]).max() > 1e-3


def test_query_without_target_mapping_is_refused():
    x = inputs()
    with pytest.raises(ValueError, match="both `query` and `target_mapping`"):
        make_layer()(x["content"], x["segment_ids"], x["padding_mask"], query=x["query"])

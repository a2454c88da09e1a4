"""AttentionStatistics against per-token loops in NumPy, on hand-made and encoder probabilities."""

import keras
import numpy as np
import pytest

import kbert
from kbert.analysis import AttentionStatistics

CLS, SEP, COMMA, DOT = 1, 2, 3, 4


def loop_reference(probabilities, token_ids, padding_mask):
    """Each statistic by a plain loop over (layer, head, example, query): Clark et al.'s definitions."""
    batch, layers, heads, length, _ = probabilities.shape
    names = ["entropy", "cls", "sep", "punctuation", "previous", "next"]
    result = {name: np.zeros((layers, heads)) for name in names}
    for layer in range(layers):
        for head in range(heads):
            sums = dict.fromkeys(names, 0.0)
            counts = dict.fromkeys(names, 0)
            for b in range(batch):
                for q in range(length):
                    if not padding_mask[b, q]:
                        continue
                    row = probabilities[b, layer, head, q]
                    real_keys = [k for k in range(length) if padding_mask[b, k]]
                    values = {
                        "entropy": -sum(p * np.log(p) for p in row if p > 0),
                        "cls": sum(row[k] for k in real_keys if token_ids[b, k] == CLS),
                        "sep": sum(row[k] for k in real_keys if token_ids[b, k] == SEP),
                        "punctuation": sum(row[k] for k in real_keys if token_ids[b, k] in (COMMA, DOT)),
                    }
                    if q > 0 and padding_mask[b, q - 1]:
                        values["previous"] = row[q - 1]
                    if q + 1 < length and padding_mask[b, q + 1]:
                        values["next"] = row[q + 1]
                    for name, value in values.items():
                        sums[name] += value
                        counts[name] += 1
            for name in names:
                result[name][layer, head] = sums[name] / counts[name]
    return result


def hand_made_batch():
    """Random rows over the real keys (padding gets 0), plus a padded query row of garbage."""
    rng = np.random.default_rng(0)
    token_ids = np.array([[CLS, 7, COMMA, 8, DOT, SEP, 0, 0], [CLS, 9, 10, SEP, 11, 12, SEP, 0]])
    padding_mask = (np.arange(8)[None] < np.array([[6], [7]])).astype("int32")
    scores = rng.normal(size=(2, 3, 2, 8, 8)) * 2
    scores = np.where(padding_mask[:, None, None, None, :] == 1, scores, -np.inf)
    probabilities = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    probabilities[0, :, :, 7] = 0.125  # a padded query: must not count
    return probabilities, token_ids, padding_mask


def test_statistics_equal_the_loop_reference():
    probabilities, token_ids, padding_mask = hand_made_batch()
    stats = AttentionStatistics.compute(
        keras.ops.convert_to_tensor(probabilities.astype("float32")), token_ids, padding_mask,
        cls_ids=[CLS], sep_ids=[SEP], punctuation_ids=[COMMA, DOT])
    expected = loop_reference(probabilities, token_ids, padding_mask)
    for name, value in stats.as_dict().items():
        assert value.shape == (3, 2)
        # float32 probabilities against float64 loops: round-off only
        np.testing.assert_allclose(value, expected[name], atol=1e-5, rtol=0, err_msg=name)


def test_known_patterns():
    """Uniform heads have entropy log(n); a head on the next token scores 1 there and 0 before."""
    token_ids = np.array([[CLS, 5, 6, SEP]])
    uniform = np.full((4, 4), 0.25)
    shifted = np.eye(4, k=1)
    shifted[3, 3] = 1.0  # the last token has no next token: it looks at itself
    probabilities = np.stack([uniform, shifted])[None, None]  # (1, 1, 2, 4, 4)
    stats = AttentionStatistics.compute(probabilities, token_ids, cls_ids=[CLS], sep_ids=[SEP])
    np.testing.assert_allclose(stats.entropy[0], [np.log(4), 0.0], atol=1e-12)
    np.testing.assert_allclose(stats.next[0], [0.25, 1.0], atol=1e-12)
    np.testing.assert_allclose(stats.previous[0], [0.25, 0.0], atol=1e-12)
    np.testing.assert_allclose(stats.sep[0], [0.25, 0.5], atol=1e-12)  # rows 2 and 3 of 4 on [SEP]
    np.testing.assert_allclose(stats.punctuation[0], [0.0, 0.0], atol=1e-12)


def test_encoder_internals_and_png(tmp_path):
    """The probabilities of a real encoder on the current backend, and a PNG of them."""
    _, token_ids, padding_mask = hand_made_batch()
    encoder = kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=3, hidden_dim=12,
                                   intermediate_dim=16, max_positions=16, dropout=0.0)
    inputs = {"token_ids": token_ids.astype("int32"), "segment_ids": np.zeros_like(token_ids, "int32"),
              "padding_mask": padding_mask}
    probabilities = encoder.with_internals(hidden_states=False)(inputs)["attention_probabilities"]
    stats = AttentionStatistics.compute(probabilities, token_ids, padding_mask, cls_ids=[CLS],
                                        sep_ids=[SEP], punctuation_ids=[COMMA, DOT])
    expected = loop_reference(keras.ops.convert_to_numpy(probabilities).astype("float64"),
                              token_ids, padding_mask)
    for name, value in stats.as_dict().items():
        np.testing.assert_allclose(value, expected[name], atol=1e-5, rtol=0, err_msg=name)
    path = tmp_path / "heads.png"
    stats.save_png(path, title="tiny encoder")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_punctuation_token_ids():
    vocabulary = ["[PAD]", "[CLS]", "hello", ",", "##!", "##", "--", "a.b", "?!"]
    assert AttentionStatistics.punctuation_token_ids(vocabulary) == [3, 4, 5, 6, 8]


@pytest.mark.parametrize("shape, ids, mask, match", [
    ((2, 1, 1, 4, 5), (2, 4), None, "self-attention probabilities"),
    ((2, 1, 4, 4), (2, 4), None, "self-attention probabilities"),
    ((2, 1, 1, 4, 4), (2, 5), None, "token_ids must have shape"),
    ((2, 1, 1, 4, 4), (2, 4), (2, 3), "padding_mask must have shape"),
])
def test_bad_shapes_are_refused(shape, ids, mask, match):
    with pytest.raises(ValueError, match=match):
        AttentionStatistics.compute(np.ones(shape), np.ones(ids, "int32"),
                                    None if mask is None else np.ones(mask, "int32"))

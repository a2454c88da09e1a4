"""LayerProbe: finds the layer that carries a label; scores equal a direct scikit-learn fit."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.preprocessing import StandardScaler

import kbert
from kbert.analysis import LayerProbe, expected_layer


def synthetic(carrier, num_layers=4, num_classes=3, batch=60, length=7, seed=0):
    """Noise states in which only layer `carrier` holds the label (a class-mean shift), some
    positions ignored (-100) and padded; split into train and eval halves."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, (batch, length))
    states = rng.normal(size=(batch, num_layers + 1, length, 6)).astype("float32")
    states[:, carrier, :, :num_classes] += 3.0 * np.eye(num_classes)[labels]
    padding_mask = (np.arange(length)[None] < rng.integers(3, length + 1, (batch, 1))).astype("int32")
    labels[:, 0] = -100  # e.g. [CLS]
    half = batch // 2
    return [(states[s], labels[s], padding_mask[s]) for s in (slice(None, half), slice(half, None))]


@pytest.mark.parametrize("carrier", [1, 3])
def test_the_probe_finds_the_layer_that_carries_the_label(carrier):
    (train_states, train_labels, train_mask), (eval_states, eval_labels, eval_mask) = synthetic(carrier)
    probe = LayerProbe.fit(train_states, train_labels, eval_states, eval_labels,
                           train_padding_mask=train_mask, eval_padding_mask=eval_mask)
    scores = np.array(probe.scores)
    assert scores.argmax() == carrier
    assert scores[carrier] > 0.9 and np.delete(scores, carrier).max() < 0.6  # chance is 1/3
    assert abs(probe.expected_layer - carrier) < 0.3  # small gains from noise layers only
    assert np.all(np.diff(probe.cumulative_scores)[: carrier - 1] < 0.15)


def test_scores_equal_a_direct_scikit_learn_fit_on_the_kept_tokens():
    (train_states, train_labels, train_mask), (eval_states, eval_labels, eval_mask) = synthetic(2)
    probe = LayerProbe.fit(train_states, train_labels, eval_states, eval_labels, metric="macro_f1",
                           train_padding_mask=train_mask, eval_padding_mask=eval_mask)

    def tokens(states, labels, mask, layers):  # by loops: real tokens with a label
        rows = [(np.concatenate([states[b, layer, t] for layer in layers]), labels[b, t])
                for b in range(len(labels)) for t in range(labels.shape[1])
                if mask[b, t] and labels[b, t] != -100]
        return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])

    for layers, score in [([1], probe.scores[1]), ([0, 1, 2], probe.cumulative_scores[2])]:
        x, y = tokens(train_states, train_labels, train_mask, layers)
        x_eval, y_eval = tokens(eval_states, eval_labels, eval_mask, layers)
        scaler = StandardScaler().fit(x)
        fitted = LogisticRegression(max_iter=500).fit(scaler.transform(x), y)
        expected = f1_score(y_eval, fitted.predict(scaler.transform(x_eval)), average="macro")
        assert score == pytest.approx(expected, abs=1e-12)


def test_expected_layer_by_hand():
    # gains 0.2, 0, 0.1, 0.1: (1·0.2 + 3·0.1 + 4·0.1) / 0.4 = 2.25
    assert expected_layer([0.3, 0.5, 0.5, 0.6, 0.7]) == pytest.approx(2.25)
    assert expected_layer([0.5, 0.9]) == pytest.approx(1.0)
    assert np.isnan(expected_layer([0.8, 0.7, 0.6]))  # the layers add nothing


def test_encoder_hidden_states_and_png(tmp_path):
    """Tensors from a real encoder on the current backend: the embeddings carry the token's parity."""
    rng = np.random.default_rng(1)
    token_ids = rng.integers(2, 12, (40, 8)).astype("int32")
    encoder = kbert.models.Encoder(vocabulary_size=12, num_layers=2, num_heads=2, hidden_dim=16,
                                   intermediate_dim=16, max_positions=8, dropout=0.0)
    inputs = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
              "padding_mask": np.ones_like(token_ids)}
    states = encoder.with_internals(attention_probabilities=False)(inputs)["hidden_states"]
    labels = token_ids % 2
    probe = LayerProbe.fit(states[:20], labels[:20], states[20:], labels[20:])
    assert len(probe.scores) == 3 and probe.scores[0] > 0.9
    path = tmp_path / "probe.png"
    probe.save_png(path, title="parity")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_inputs_are_refused():
    states, labels = np.zeros((2, 3, 4, 5)), np.zeros((2, 4), "int32")
    with pytest.raises(ValueError, match="metric must be one of"):
        LayerProbe.fit(states, labels, states, labels, metric="auc")
    with pytest.raises(ValueError, match=r"train states must be \(batch, layers \+ 1"):
        LayerProbe.fit(states[0], labels, states, labels)
    with pytest.raises(ValueError, match="eval_padding_mask must have the labels' shape"):
        LayerProbe.fit(states, labels, states, labels, eval_padding_mask=np.ones((2, 3)))
    with pytest.raises(ValueError, match="No eval token is probed"):
        LayerProbe.fit(states, labels, states, np.full((2, 4), -100))
    with pytest.raises(ValueError, match="fewer than two distinct labels"):
        LayerProbe.fit(states, labels, states, labels)
    with pytest.raises(ValueError, match="differ in layers or width"):
        LayerProbe.fit(states, labels + np.eye(4, dtype="int32")[:2], states[:, :2], labels)

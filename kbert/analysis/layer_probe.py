"""Layer-wise linear probing of frozen features (Tenney et al. 2019), with scikit-learn."""

import dataclasses

import keras
import numpy as np

# Labels with this value (transformers' ignore index) are not probed.
IGNORED_LABEL = -100
METRICS = ("accuracy", "macro_f1")


@dataclasses.dataclass(frozen=True)
class LayerProbe:
    """A linear probe per layer on frozen hidden states, for a token-level label.

    `LayerProbe.fit` trains scikit-learn's `LogisticRegression` (multinomial,
    L2, lbfgs) on the token features of each layer alone, and on layers
    `0..l` together (concatenated), and scores each on held-out tokens:

    - `scores[l]`: the probe on layer `l` (0 = the embeddings): the curve;
    - `cumulative_scores[l]`: the probe on layers `0..l`; the gain of adding
      layer `l` is `Δ_l = cumulative_scores[l] − cumulative_scores[l − 1]`;
    - `expected_layer`: `Σ_l l·Δ_l / Σ_l Δ_l` over `l = 1..L` (Tenney et
      al.'s "expected layer", with the concatenation in place of their
      learned scalar mix; docs/algorithms.md §18); NaN when the layers add nothing
      (`Σ Δ_l <= 0`).

    Tokens whose label is `IGNORED_LABEL` (-100) or whose `padding_mask` is 0
    are left out of training and scoring. Features are standardized per layer
    (mean and variance of the training tokens) before the probe.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, (40, 6))
    >>> states = rng.normal(size=(40, 3, 6, 4))  # (batch, layers + 1, sequence, width)
    >>> states[:, 2, :, 0] += 4 * labels  # layer 2 carries the label
    >>> probe = LayerProbe.fit(states[:30], labels[:30], states[30:], labels[30:])
    >>> [round(s, 1) for s in probe.scores], probe.expected_layer
    ([0.5, 0.5, 1.0], 2.0)

    References:
        Tenney et al., "BERT Rediscovers the Classical NLP Pipeline", ACL 2019.
    """

    scores: tuple
    cumulative_scores: tuple
    metric: str

    @classmethod
    def fit(cls, train_states, train_labels, eval_states, eval_labels, *, train_padding_mask=None,
            eval_padding_mask=None, metric="accuracy", regularization=1.0, max_iterations=500):
        """Train and score the probes.

        Args:
            train_states, eval_states: `(batch, layers + 1, sequence, width)`
                hidden states (`with_internals()["hidden_states"]`), tensors or arrays.
            train_labels, eval_labels: int `(batch, sequence)`; -100 = ignored.
            train_padding_mask, eval_padding_mask: optional 0/1 `(batch, sequence)`.
            metric: `"accuracy"` or `"macro_f1"` (scikit-learn `f1_score`, macro average).
            regularization: the inverse L2 strength `C` of `LogisticRegression`.
            max_iterations: lbfgs iterations per probe.
        """
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}; received {metric!r}.")
        train = _token_features(train_states, train_labels, train_padding_mask, "train")
        evaluation = _token_features(eval_states, eval_labels, eval_padding_mask, "eval")
        if train[0].shape[1:] != evaluation[0].shape[1:]:
            raise ValueError(
                f"train and eval states differ in layers or width: {train[0].shape[1:]} and "
                f"{evaluation[0].shape[1:]}."
            )
        if len(np.unique(train[1])) < 2:
            raise ValueError("The training tokens carry fewer than two distinct labels: nothing to probe.")

        def score(layers):
            return _probe_score(train, evaluation, layers, metric, regularization, max_iterations)

        num_states = train[0].shape[1]
        return cls(
            scores=tuple(score([layer]) for layer in range(num_states)),
            cumulative_scores=tuple(score(list(range(layer + 1))) for layer in range(num_states)),
            metric=metric,
        )

    @property
    def expected_layer(self):
        """`Σ l·Δ_l / Σ Δ_l` over the cumulative gains (see the class docstring)."""
        return expected_layer(self.cumulative_scores)

    def save_png(self, path, title=None):
        """The per-layer and cumulative score curves, written to a PNG at `path`."""
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot

        figure, axis = pyplot.subplots(figsize=(6, 4), constrained_layout=True)
        layers = range(len(self.scores))
        axis.plot(layers, self.scores, marker="o", label="layer l alone")
        axis.plot(layers, self.cumulative_scores, marker="s", linestyle="--", label="layers 0..l")
        if np.isfinite(self.expected_layer):
            axis.axvline(self.expected_layer, color="grey", linestyle=":",
                         label=f"expected layer {self.expected_layer:.2f}")
        axis.set(xlabel="layer (0 = embeddings)", ylabel=self.metric, xticks=list(layers),
                 title=title or "linear probe per layer")
        axis.legend()
        figure.savefig(path, dpi=100)
        pyplot.close(figure)


def expected_layer(cumulative_scores):
    """`Σ_{l≥1} l·Δ_l / Σ Δ_l`, `Δ_l = s_l − s_{l−1}`; NaN when `Σ Δ_l <= 0`.

    >>> expected_layer([0.5, 0.6, 0.9, 0.9])  # (1·0.1 + 2·0.3) / 0.4
    1.75
    """
    scores = np.asarray(cumulative_scores, "float64")
    gains = np.diff(scores)
    if gains.sum() <= 0:
        return float("nan")
    return round(float(np.arange(1, len(scores)) @ gains / gains.sum()), 12)


def _token_features(states, labels, padding_mask, split):
    """`(features (tokens, layers + 1, width), labels (tokens,))` of the probed tokens."""
    states = np.asarray(keras.ops.convert_to_numpy(states), "float32")
    labels = np.asarray(keras.ops.convert_to_numpy(labels))
    if states.ndim != 4 or labels.shape != (states.shape[0], states.shape[2]):
        raise ValueError(
            f"{split} states must be (batch, layers + 1, sequence, width) and labels (batch, "
            f"sequence); received shapes {states.shape} and {labels.shape}."
        )
    kept = labels != IGNORED_LABEL
    if padding_mask is not None:
        padding_mask = np.asarray(keras.ops.convert_to_numpy(padding_mask))
        if padding_mask.shape != labels.shape:
            raise ValueError(
                f"{split}_padding_mask must have the labels' shape {labels.shape}; "
                f"received {padding_mask.shape}."
            )
        kept &= padding_mask.astype(bool)
    if not kept.any():
        raise ValueError(f"No {split} token is probed: every label is -100 or padding.")
    return np.moveaxis(states, 1, 2)[kept], labels[kept]


def _probe_score(train, evaluation, layers, metric, regularization, max_iterations):
    """The held-out score of a logistic regression on the concatenated `layers`."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.preprocessing import StandardScaler

    def features(split):
        return split[0][:, layers].reshape(len(split[0]), -1)

    scaler = StandardScaler().fit(features(train))
    probe = LogisticRegression(C=regularization, max_iter=max_iterations)
    probe.fit(scaler.transform(features(train)), train[1])
    predicted = probe.predict(scaler.transform(features(evaluation)))
    if metric == "accuracy":
        return float(accuracy_score(evaluation[1], predicted))
    return float(f1_score(evaluation[1], predicted, average="macro"))

"""Per-head attention statistics (Clark et al. 2019), computed in NumPy from attention probabilities."""

import dataclasses
import string

import keras
import numpy as np

# The statistics, in the order `save_png` draws them, with their titles.
STATISTICS = {
    "entropy": "entropy (nats)",
    "cls": "attention to [CLS]",
    "sep": "attention to [SEP]",
    "punctuation": "attention to punctuation",
    "previous": "attention to the previous token",
    "next": "attention to the next token",
}


@dataclasses.dataclass(frozen=True)
class AttentionStatistics:
    """What each head looks at: six NumPy arrays `(layers, heads)` (docs/algorithms.md §18).

    Made by `AttentionStatistics.compute` from self-attention probabilities
    `(batch, layers, heads, sequence, sequence)` (as
    `Encoder.with_internals()` returns them). Every statistic is a mean over
    the real (non-padding) query tokens of the batch, each token weighing the
    same:

    - `entropy`: `−Σ_k p_k log p_k` of the query's distribution, in nats;
    - `cls`, `sep`, `punctuation`: the probability mass on real keys whose id
      is one of `cls_ids`, `sep_ids`, `punctuation_ids`;
    - `previous`, `next`: the probability on the key just before (after) the
      query, averaged over the queries that have a real token there.

    Example:
    >>> probabilities = np.full((1, 1, 2, 3, 3), 1 / 3)  # batch, layers, heads, q, k
    >>> stats = AttentionStatistics.compute(probabilities, [[0, 5, 1]], cls_ids=[0], sep_ids=[1])
    >>> stats.cls.shape, round(float(stats.sep[0, 0]), 4), round(float(stats.entropy[0, 0]), 4)
    ((1, 2), 0.3333, 1.0986)

    References:
        Clark et al., "What Does BERT Look At? An Analysis of BERT's
        Attention", BlackboxNLP 2019.
    """

    entropy: np.ndarray
    cls: np.ndarray
    sep: np.ndarray
    punctuation: np.ndarray
    previous: np.ndarray
    next: np.ndarray

    @classmethod
    def compute(cls, probabilities, token_ids, padding_mask=None, *, cls_ids=(), sep_ids=(),
                punctuation_ids=()):
        """The statistics of attention probabilities over a batch.

        Args:
            probabilities: `(batch, layers, heads, sequence, sequence)`, a
                tensor or array; each real query's row sums to 1.
            token_ids: int `(batch, sequence)`.
            padding_mask: 0/1 `(batch, sequence)`; None: every token is real.
            cls_ids, sep_ids, punctuation_ids: the ids counted as [CLS],
                [SEP] and punctuation (e.g. from `punctuation_token_ids`).
        """
        probabilities = np.asarray(keras.ops.convert_to_numpy(probabilities), "float64")
        token_ids = np.asarray(keras.ops.convert_to_numpy(token_ids))
        real = _checked_padding_mask(probabilities, token_ids, padding_mask)
        queries = real[:, None, None, :]  # (batch, 1, 1, q): the tokens averaged over

        def mean_over_queries(values, counted=queries):
            counted = np.broadcast_to(counted, values.shape)
            return (values * counted).sum(axis=(0, 3)) / max(counted[:, 0, 0].sum(), 1)

        def mass_on(ids):
            keys = np.isin(token_ids, np.asarray(list(ids), dtype=token_ids.dtype)) & real
            return mean_over_queries((probabilities * keys[:, None, None, None, :]).sum(axis=-1))

        logs = np.log(np.where(probabilities > 0, probabilities, 1.0))
        previous, next_ = _neighbour_attention(probabilities, real)
        return cls(
            entropy=mean_over_queries(-(probabilities * logs).sum(axis=-1)),
            cls=mass_on(cls_ids),
            sep=mass_on(sep_ids),
            punctuation=mass_on(punctuation_ids),
            previous=mean_over_queries(previous[0], previous[1]),
            next=mean_over_queries(next_[0], next_[1]),
        )

    @staticmethod
    def punctuation_token_ids(vocabulary):
        """The ids of the tokens of `vocabulary` (a list of strings) made of punctuation only.

        A WordPiece continuation prefix `##` is ignored.

        >>> AttentionStatistics.punctuation_token_ids(["[CLS]", "the", ",", "##.", "..."])
        [2, 3, 4]
        """
        punctuation = set(string.punctuation)
        words = [token[2:] if token.startswith("##") and len(token) > 2 else token for token in vocabulary]
        return [i for i, word in enumerate(words) if word and set(word) <= punctuation]

    def as_dict(self):
        """`{statistic name: (layers, heads) array}`."""
        return {name: getattr(self, name) for name in STATISTICS}

    def save_png(self, path, title=None):
        """One heat map per statistic, heads (rows) by layers (columns), written to a PNG at `path`."""
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot

        num_layers, num_heads = self.entropy.shape
        figure, axes = pyplot.subplots(2, 3, figsize=(12, 7), constrained_layout=True)
        for axis, (name, label) in zip(axes.flat, STATISTICS.items()):
            image = axis.imshow(getattr(self, name).T, origin="lower", aspect="auto", cmap="viridis")
            axis.set(title=label, xlabel="layer", ylabel="head",
                     xticks=range(num_layers), xticklabels=range(1, num_layers + 1),
                     yticks=range(num_heads), yticklabels=range(1, num_heads + 1))
            figure.colorbar(image, ax=axis)
        if title:
            figure.suptitle(title)
        figure.savefig(path, dpi=100)
        pyplot.close(figure)


def _checked_padding_mask(probabilities, token_ids, padding_mask):
    """The bool `(batch, sequence)` real-token mask, after checking every shape."""
    if probabilities.ndim != 5 or probabilities.shape[-1] != probabilities.shape[-2]:
        raise ValueError(
            "AttentionStatistics needs self-attention probabilities of shape (batch, layers, "
            f"heads, sequence, sequence); received shape {probabilities.shape}."
        )
    expected = (probabilities.shape[0], probabilities.shape[-1])
    if token_ids.shape != expected:
        raise ValueError(f"token_ids must have shape {expected}; received {token_ids.shape}.")
    if padding_mask is None:
        return np.ones(expected, bool)
    padding_mask = np.asarray(keras.ops.convert_to_numpy(padding_mask))
    if padding_mask.shape != expected:
        raise ValueError(f"padding_mask must have shape {expected}; received {padding_mask.shape}.")
    return padding_mask.astype(bool)


def _neighbour_attention(probabilities, real):
    """`((previous, counted), (next, counted))`: `p[q, q∓1]` `(batch, layers, heads, q)`, and
    the bool `(batch, 1, 1, q)` of the real queries whose neighbour is real."""
    length = probabilities.shape[-1]
    positions = np.arange(length)
    results = []
    for shift in (-1, 1):
        keys = np.clip(positions + shift, 0, length - 1)
        values = probabilities[..., positions, keys]
        neighbour_real = np.zeros_like(real)
        inside = (positions + shift >= 0) & (positions + shift < length)
        neighbour_real[:, inside] = real[:, positions[inside] + shift]
        results.append((values, (real & neighbour_real)[:, None, None, :]))
    return results

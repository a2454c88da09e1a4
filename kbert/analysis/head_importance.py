"""Michel et al.'s head importance: how much a loss moves when a head's output is scaled."""

import keras
import numpy as np

from kbert.analysis.wrapped_encoder import wrapped_encoder
from kbert.backend.ops import value_and_gradients


def head_importance(model, batches, loss_fn=None, normalize=True):
    """`I_h = E |∂L/∂ξ_h|` for every attention head `h`, ξ the head mask (Michel et al. 2019).

    Each batch's loss is differentiated with respect to a head mask of ones
    (`Encoder`'s `head_mask`, which scales each head's output); the absolute
    gradients are averaged over the batches, as Michel et al.'s code
    averages them (batches of one example give the per-example expectation).
    With `normalize`, each layer's scores are divided by their ℓ2 norm.
    Dropout is off (`training=False`); metrics a loss updates are left as they were.

    Args:
        model: a kbert `Encoder`, or a model wrapping one as `backbone` that
            passes a `head_mask` input entry on to it (kbert's tasks and
            pretrainers do).
        batches: an iterable of `(x, y)` or `(x, y, sample_weight)` batches
            with `x` a dict of inputs (a list, a `tf.data.Dataset`, ...), or
            of input dicts alone.
        loss_fn: `loss_fn(x, y, y_pred, sample_weight)` → a scalar loss;
            defaults to the model's own `compute_loss` (a task's or a
            pretrainer's loss). An `Encoder` has none: pass one.
        normalize: divide each layer's scores by their ℓ2 norm.

    Returns:
        float32 NumPy `(num_layers, num_heads)`, or a list of one array per
        layer where layers have different head counts (a pruned encoder).

    Example:
    >>> encoder = kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=2,
    ...                                hidden_dim=8, intermediate_dim=16, max_positions=8)
    >>> x = {"token_ids": np.arange(12).reshape(2, 6) % 20, "segment_ids": np.zeros((2, 6), "int32"),
    ...      "padding_mask": np.ones((2, 6), "int32")}
    >>> def loss_fn(x, y, y_pred, sample_weight):
    ...     return keras.ops.mean(keras.ops.square(y_pred["pooled_output"]))
    >>> scores = head_importance(encoder, [x], loss_fn)
    >>> scores.shape, np.allclose(np.linalg.norm(scores, axis=1), 1.0)
    ((2, 2), True)
    """
    encoder = wrapped_encoder(model, "head_importance")
    if loss_fn is None:
        if model is encoder:
            raise ValueError("An Encoder has no loss of its own: pass a loss_fn.")
        loss_fn = _own_loss(model)
    counts = encoder.layer_num_heads
    totals, seen = [np.zeros(count, "float64") for count in counts], 0
    for batch in batches:
        gradients = _head_mask_gradients(model, batch, loss_fn, counts)
        totals = [total + np.abs(gradient) for total, gradient in zip(totals, gradients)]
        seen += 1
    if not seen:
        raise ValueError("head_importance needs at least one batch; `batches` is empty.")
    scores = [(total / seen).astype("float32") for total in totals]
    if normalize:
        scores = [score / max(float(np.linalg.norm(score)), 1e-20) for score in scores]
    return np.stack(scores) if len(set(counts)) == 1 else scores


def _own_loss(model):
    def loss_fn(x, y, y_pred, sample_weight):
        return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                  training=False)

    return loss_fn


def _head_mask_gradients(model, batch, loss_fn, counts):
    """The gradient of `batch`'s loss with respect to each layer's head mask, at ones."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(
        batch if isinstance(batch, tuple) else (batch,)
    )
    if not isinstance(x, dict):
        raise ValueError(f"Each batch's inputs must be a dict; received {type(x).__name__}.")

    def loss(head_masks):
        # Metric updates inside the loss (a task's accuracy) stay in this scope.
        with keras.StatelessScope():
            y_pred = model({**x, "head_mask": list(head_masks)}, training=False)
            return loss_fn(x, y, y_pred, sample_weight)

    _, gradients = value_and_gradients(loss, [np.ones(count, "float32") for count in counts])
    return gradients

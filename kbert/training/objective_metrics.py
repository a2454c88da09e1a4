"""The metrics a pretrainer reports next to `loss`: a loss and an accuracy per objective.

An objective named `mlm` gives the model two attributes, `mlm_loss_tracker`
(a `Mean`, reported as `mlm_loss`) and `mlm_accuracy`; `compute_loss` records
each batch with `track_objective`. Keras finds the metrics as attributes, so
`fit` and `evaluate` report them and reset them every epoch.
"""

import keras


def add_objective_metrics(model, objective, accuracy=keras.metrics.SparseCategoricalAccuracy):
    """Give `model` the metrics `{objective}_loss` and (unless `accuracy` is None) `_accuracy`.

    They are the attributes `{objective}_loss_tracker` and `{objective}_accuracy`;
    `accuracy` is the accuracy metric's class.

    >>> model = keras.Model()
    >>> add_objective_metrics(model, "pair")
    >>> model.pair_loss_tracker.name, model.pair_accuracy.name
    ('pair_loss', 'pair_accuracy')
    """
    setattr(model, f"{objective}_loss_tracker", keras.metrics.Mean(name=f"{objective}_loss"))
    if accuracy is not None:
        setattr(model, f"{objective}_accuracy", accuracy(name=f"{objective}_accuracy"))


def track_objective(model, objective, loss, labels=None, predictions=None, sample_weight=None):
    """Record a batch's `loss` (and, given `labels`, its accuracy) in `model`'s `objective` metrics.

    Returns `loss`.

    >>> model = keras.Model()
    >>> add_objective_metrics(model, "pair")
    >>> loss = track_objective(model, "pair", 0.5, keras.ops.array([1, 0]),
    ...                        keras.ops.array([[0.2, 0.8], [0.3, 0.7]]))
    >>> float(model.pair_loss_tracker.result()), float(model.pair_accuracy.result())
    (0.5, 0.5)
    """
    # A weight of ones, as a tensor: without one, Keras' `Mean` counts the scalar
    # as `ops.cast(1, ...)`, a tensor made from host data at every step on PyTorch.
    getattr(model, f"{objective}_loss_tracker").update_state(loss, sample_weight=keras.ops.ones_like(loss))
    if labels is not None:
        getattr(model, f"{objective}_accuracy").update_state(
            labels, predictions, sample_weight=sample_weight
        )
    return loss

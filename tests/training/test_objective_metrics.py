"""The shared loss and accuracy trackers of the pretrainers."""

import keras
import numpy as np

from kbert.training.objective_metrics import add_objective_metrics, track_objective


def test_trackers_average_losses_and_weighted_accuracy():
    model = keras.Model()
    add_objective_metrics(model, "mlm")
    track_objective(model, "mlm", 1.0, np.array([1, 0]), np.array([[0.0, 1.0], [0.0, 1.0]]),
                    sample_weight=np.array([1.0, 0.0]))
    track_objective(model, "mlm", 3.0, np.array([0]), np.array([[1.0, 0.0]]))
    assert float(model.mlm_loss_tracker.result()) == 2.0
    assert float(model.mlm_accuracy.result()) == 1.0  # the weight-0 miss does not count


def test_loss_only_objective_has_no_accuracy():
    model = keras.Model()
    add_objective_metrics(model, "rtd", accuracy=None)
    assert not hasattr(model, "rtd_accuracy")
    assert track_objective(model, "rtd", 0.5) == 0.5

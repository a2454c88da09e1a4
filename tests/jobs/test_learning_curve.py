"""The learning curve: the moving average against NumPy's convolution, and a PNG that matplotlib reads back."""

import numpy as np
import pytest

from kbert.jobs.learning_curve import moving_average, save_learning_curve

pytestmark = pytest.mark.backend_independent  # a matplotlib report: the same on every backend, one run


@pytest.mark.parametrize("window", [1, 3, 20])
def test_moving_average_is_the_mean_of_the_last_values(window):
    values = np.random.default_rng(window).normal(size=50)
    full = np.convolve(values, np.ones(window) / window, mode="valid")  # where `window` values exist
    averaged = moving_average(values, window)
    np.testing.assert_allclose(averaged[window - 1 :], full, rtol=1e-12)
    np.testing.assert_allclose(averaged[: window - 1], np.cumsum(values)[: window - 1] / np.arange(1, window))


def test_the_curve_is_a_png_of_the_requested_size(tmp_path):
    pyplot = pytest.importorskip("matplotlib.pyplot")
    path = tmp_path / "curve.png"
    save_learning_curve(path, list(np.linspace(7.0, 4.0, 300)), "bert_mini, mlm_nsp")
    image = pyplot.imread(path)
    assert image.shape[:2] == (400, 700)  # 7 x 4 inches at 100 dpi

"""The main job's learning curve: each step's training loss and its moving average, as a PNG.

matplotlib is imported when a curve is drawn, with its non-interactive
backend, so nothing opens a window and `import kbert` stays light.
"""

import numpy as np

SMOOTHING_STEPS = 20


def moving_average(values, window=SMOOTHING_STEPS):
    """The mean of each value and up to `window - 1` values before it.

    >>> moving_average([1.0, 3.0, 5.0, 7.0], window=2).tolist()
    [1.0, 2.0, 4.0, 6.0]
    """
    sums = np.concatenate([[0.0], np.cumsum(np.asarray(values, np.float64))])
    end = np.arange(1, len(sums))
    start = np.maximum(end - window, 0)
    return (sums[end] - sums[start]) / (end - start)


def save_learning_curve(path, losses, title):
    """Draw `losses` (one per step) and their moving average under `title`, to the PNG `path`.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "learning_curve.png")
    >>> save_learning_curve(path, [3.0, 2.5, 2.2, 2.0], "bert_tiny, mlm_nsp")
    >>> open(path, "rb").read(4) == b"\\x89PNG"
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    steps = np.arange(1, len(losses) + 1)
    figure, axes = pyplot.subplots(figsize=(7, 4))
    axes.plot(steps, losses, color="0.75", linewidth=0.8, label="training loss, per step")
    axes.plot(steps, moving_average(losses), color="C0", label=f"mean of the last {SMOOTHING_STEPS} steps")
    axes.set(xlabel="step", ylabel="loss", title=title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)

"""Linear warm-up then linear decay, the BERT-family learning-rate schedule."""

import keras
from keras import ops

from kbert.backend.ops import clip


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Rise linearly from 0 to the peak over `warmup_steps`, then fall linearly to the end.

    `lr(step) = peak · step / warmup_steps` for `step < warmup_steps`, then
    `end + (peak − end) · (1 − (step − warmup_steps) / (total_steps − warmup_steps))`,
    held at `end_learning_rate` after `total_steps`. `step` is the optimizer's
    `iterations` (0 for the first update, whose rate is therefore 0 when there
    is a warm-up).

    This is Hugging Face's `get_linear_schedule_with_warmup` (the peak is
    reached at the end of warm-up). Google's BERT `optimization.py` differs
    slightly: its linear decay runs from step 0 over all `total_steps` and
    warm-up overrides it, so right after warm-up its rate is
    `peak · (1 − warmup_steps / total_steps)` rather than `peak`.

    Args:
        peak_learning_rate: the rate at the end of warm-up.
        warmup_steps: steps of linear warm-up (0 for none).
        total_steps: the step at which the rate reaches `end_learning_rate`.
        end_learning_rate: the final rate (0).

    Example:
    >>> schedule = WarmupLinearDecay(1e-4, warmup_steps=10, total_steps=110)
    >>> [round(float(schedule(step)), 8) for step in (0, 5, 10, 60, 110)]
    [0.0, 5e-05, 0.0001, 5e-05, 0.0]
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, end_learning_rate=0.0):
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive; received {total_steps}.")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(
                f"warmup_steps must be in [0, total_steps={total_steps}]; received {warmup_steps}."
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
        decay = end + (peak - end) * (1.0 - clip(progress, 0.0, 1.0))
        return ops.where(step < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
        }

import json

import keras
import numpy as np
import pytest

from kbert.training.warmup_linear_decay import WarmupLinearDecay


def values(schedule, steps):
    return [float(schedule(step)) for step in steps]


def test_values_at_the_landmarks():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=100, total_steps=1100, end_learning_rate=1e-5)
    # step 0, mid-warmup, peak, mid-decay, end, after the end
    np.testing.assert_allclose(
        values(schedule, [0, 50, 99, 100, 600, 1100, 5000]),
        [0.0, 5e-4, 9.9e-4, 1e-3, (1e-3 + 1e-5) / 2, 1e-5, 1e-5],
        rtol=1e-6,
        atol=1e-12,
    )


def test_without_warmup_it_starts_at_the_peak():
    schedule = WarmupLinearDecay(2e-4, warmup_steps=0, total_steps=10)
    np.testing.assert_allclose(
        values(schedule, [0, 5, 10]), [2e-4, 1e-4, 0.0], rtol=1e-6, atol=1e-12
    )


def test_tensor_steps_and_an_optimizer():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=20)
    rates = keras.ops.convert_to_numpy(schedule(keras.ops.arange(0, 25, 5)))
    np.testing.assert_allclose(rates, [0.0, 5e-4, 1e-3, 5e-4, 0.0], rtol=1e-6, atol=1e-12)
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    optimizer.iterations.assign(15)
    np.testing.assert_allclose(float(optimizer.learning_rate), 5e-4, rtol=1e-6)


def test_serialization_round_trip():
    schedule = WarmupLinearDecay(1e-4, warmup_steps=10, total_steps=110, end_learning_rate=1e-6)
    config = json.loads(json.dumps(keras.optimizers.schedules.serialize(schedule)))
    restored = keras.optimizers.schedules.deserialize(config)
    assert isinstance(restored, WarmupLinearDecay)
    assert restored.get_config() == schedule.get_config()
    optimizer = keras.optimizers.AdamW(learning_rate=schedule)
    clone = keras.optimizers.AdamW.from_config(json.loads(json.dumps(optimizer.get_config())))
    clone.iterations.assign(60)
    np.testing.assert_allclose(float(clone.learning_rate), (1e-4 + 1e-6) / 2, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"warmup_steps": 10, "total_steps": 0}, "total_steps must be positive"),
        ({"warmup_steps": 20, "total_steps": 10}, r"warmup_steps must be in \[0, total_steps=10\]; received 20"),
        ({"warmup_steps": -1, "total_steps": 10}, "warmup_steps must be in"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WarmupLinearDecay(1e-4, **kwargs)

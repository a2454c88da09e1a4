"""kbert's AdamW against torch.optim.AdamW and a NumPy reference, on every backend."""

import keras
import numpy as np
import pytest
import torch
from helpers import to_numpy

from kbert.pretraining import AdamW, create_optimizer

SHAPES = {"kernel": (3, 4), "bias": (4,), "embeddings": (5, 3)}
RATE, DECAY, BETAS, EPSILON = 0.05, 0.1, (0.9, 0.98), 1e-3  # a large epsilon, so its place shows


def draws(steps=4, seed=0):
    """Initial values and `steps` rounds of gradients, `{name: array}` each."""
    rng = np.random.default_rng(seed)
    start = {name: rng.normal(size=shape).astype("float32") for name, shape in SHAPES.items()}
    grads = [{name: rng.normal(size=shape).astype("float32") for name, shape in SHAPES.items()}
             for _ in range(steps)]
    return start, grads


def run_kbert(optimizer, start, grads):
    variables = {name: keras.Variable(value, name=name) for name, value in start.items()}
    for step in grads:
        optimizer.apply_gradients([(step[name], variables[name]) for name in SHAPES])
    return {name: to_numpy(variable) for name, variable in variables.items()}


def numpy_adamw(start, grads, decayed):
    """The Adam paper's Algorithm 1 with decoupled decay, in float64."""
    weights = {name: value.astype(np.float64) for name, value in start.items()}
    moments = {name: (np.zeros(SHAPES[name]), np.zeros(SHAPES[name])) for name in SHAPES}
    for t, step in enumerate(grads, start=1):
        for name, g in step.items():
            if name in decayed:
                weights[name] *= 1 - RATE * DECAY
            m, v = moments[name]
            m = BETAS[0] * m + (1 - BETAS[0]) * g
            v = BETAS[1] * v + (1 - BETAS[1]) * g**2
            moments[name] = m, v
            m_hat, v_hat = m / (1 - BETAS[0] ** t), v / (1 - BETAS[1] ** t)
            weights[name] -= RATE * m_hat / (np.sqrt(v_hat) + EPSILON)
    return weights


@pytest.mark.fast_paths_both_ways
def test_steps_equal_torch_adamw_with_the_same_settings():
    start, grads = draws()
    ours = run_kbert(AdamW(RATE, weight_decay=DECAY, beta_1=BETAS[0], beta_2=BETAS[1],
                           epsilon=EPSILON), start, grads)
    params = {name: torch.nn.Parameter(torch.tensor(value)) for name, value in start.items()}
    reference = torch.optim.AdamW(params.values(), lr=RATE, betas=BETAS, eps=EPSILON,
                                  weight_decay=DECAY)
    for step in grads:
        for name, param in params.items():
            param.grad = torch.tensor(step[name])
        reference.step()
    for name, param in params.items():
        np.testing.assert_allclose(ours[name], param.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_create_optimizer_keeps_bias_out_of_decay_as_the_numpy_reference_does():
    start, grads = draws(seed=1)
    optimizer = create_optimizer(  # so many steps that the rate stays RATE to 1e-8
        "adamw", RATE, total_steps=10**9, warmup_steps=0, weight_decay=DECAY, beta_2=BETAS[1],
        epsilon=EPSILON, clipnorm=None)
    ours = run_kbert(optimizer, start, grads)
    expected = numpy_adamw(start, grads, decayed={"kernel", "embeddings"})
    for name in SHAPES:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_zero_decay_leaves_weights_to_adam_alone():
    start, grads = draws(steps=2, seed=2)
    ours = run_kbert(AdamW(RATE, weight_decay=0.0, beta_1=BETAS[0], beta_2=BETAS[1],
                           epsilon=EPSILON), start, grads)
    expected = numpy_adamw(start, grads, decayed=set())
    for name in SHAPES:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_model_trains_with_it_and_it_round_trips_its_config():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = AdamW(1e-2, weight_decay=0.01)
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    losses = model.fit(x, y, epochs=30, batch_size=16, verbose=0).history["loss"]
    assert losses[-1] < 0.2 * losses[0]
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is AdamW and restored.get_config() == optimizer.get_config()


def test_amsgrad_is_refused_by_name():
    with pytest.raises(ValueError, match="amsgrad"):
        AdamW(amsgrad=True)

"""Compiled training on PyTorch: `compile(jit_compile=True)` trains every pretrainer and task model.

For each model, 3 steps of `fit` compiled give eager's losses (to 1e-4); the
step is one graph (dynamo counts no graph break) and the third step
compiles nothing new. Dynamo's graphs run through AOT autograd's eager
backend (`aot_eager`) here: it traces forward and backward as inductor does,
without inductor's C++ build, which takes minutes a model on this CPU.
"""

import functools

import keras
import numpy as np
import pytest
from helpers import BACKEND
from trainable_models import MODELS

from kbert.pretraining import create_optimizer

pytestmark = pytest.mark.skipif(
    BACKEND != "torch", reason="jit_compile=True compiles with torch.compile on PyTorch only"
)
STEPS = 3


class _StepRecord(keras.callbacks.Callback):
    """Each step's loss, and how many graphs dynamo has compiled after it."""

    def __init__(self):
        super().__init__()
        self.losses, self.graphs = [], []

    def on_train_batch_end(self, batch, logs=None):
        from torch._dynamo.utils import counters

        self.losses.append(float(logs["loss"]))
        self.graphs.append(counters["stats"]["unique_graphs"])


def _train(name, jit_compile):
    """`STEPS` steps of `fit` (one batch an epoch, so each epoch's loss is its step's); the record and the model."""
    keras.utils.set_random_seed(0)
    model, (x, y) = MODELS[name]()
    model.compile(optimizer=create_optimizer("adamw", 1e-3, total_steps=10, warmup_steps=1),
                  jit_compile=jit_compile)
    record = _StepRecord()
    batch = len(keras.tree.flatten(x)[0])
    model.fit(x, y, batch_size=batch, epochs=STEPS, shuffle=False, verbose=0, callbacks=[record])
    return record, model, (x, y)


@pytest.fixture
def aot_eager(monkeypatch):
    """`torch.compile` with the `aot_eager` backend, dynamo's state reset before and after."""
    import torch

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.slow(
    reason="Dynamo traces the model's whole training step, forward and backward, after an eager fit to compare"
)
def test_compiled_fit_matches_eager_in_one_graph(name, aot_eager):
    from torch._dynamo.utils import counters

    eager, _, _ = _train(name, jit_compile=False)
    counters.clear()
    compiled, _, _ = _train(name, jit_compile=True)
    np.testing.assert_allclose(compiled.losses, eager.losses, atol=1e-4, rtol=1e-4)
    assert compiled.graphs[2] == compiled.graphs[1], f"the third step compiled again: {compiled.graphs}"
    assert not counters["graph_break"], list(counters["graph_break"])

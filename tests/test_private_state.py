"""The private Keras and PyTorch attributes that `kbert.backend.private_state` reads still exist.

Each check names the attribute, so that an upgrade of Keras or PyTorch that
drops one fails here, by name, rather than somewhere inside a model.
"""

import keras
import numpy as np
import pytest
from helpers import BACKEND

from kbert.backend import private_state


def _compiled_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _built_adam():
    variable = keras.Variable(np.zeros(2, "float32"))
    optimizer = keras.optimizers.Adam()
    optimizer.build([variable])
    return optimizer


def _built_dense():
    layer = keras.layers.Dense(1)
    layer.build((None, 2))
    return layer


KERAS_ATTRIBUTES = [
    ("model._compile_loss", _compiled_model, "_compile_loss"),
    ("model._loss_tracker", _compiled_model, "_loss_tracker"),
    ("model._call_has_training_arg", _compiled_model, "_call_has_training_arg"),
    ("model._compute_loss", _compiled_model, "_compute_loss"),
    ("KerasTensor._keras_history", lambda: keras.Input((2,)), "_keras_history"),
    ("optimizer._get_variable_index", _built_adam, "_get_variable_index"),
    ("optimizer._momentums", _built_adam, "_momentums"),
    ("optimizer._velocities", _built_adam, "_velocities"),
    ("optimizer._use_weight_decay", _built_adam, "_use_weight_decay"),
    ("Dense._kernel", _built_dense, "_kernel"),
    ("layer._remat_mode", _built_dense, "_remat_mode"),
    ("layer._setattr_hook", _built_dense, "_setattr_hook"),
    ("layer._initialize_tracker", _built_dense, "_initialize_tracker"),
    ("layer._tracker", _built_dense, "_tracker"),
]


@pytest.mark.parametrize("name,make,attribute", KERAS_ATTRIBUTES, ids=[row[0] for row in KERAS_ATTRIBUTES])
def test_keras_still_has_the_private_attributes_kbert_reads(name, make, attribute):
    assert hasattr(make(), attribute), (
        f"Keras {keras.__version__} no longer has `{name}`, which kbert.backend.private_state reads"
    )


def test_keras_history_still_names_the_operation():
    operation = private_state.keras_history_operation(keras.Input((2,), optional=True))
    assert operation.optional, "`KerasTensor._keras_history.operation` no longer names the InputLayer"


def test_adam_slots_are_read_in_the_order_asked():
    variables = [keras.Variable(np.zeros(size, "float32")) for size in (2, 3)]
    optimizer = keras.optimizers.Adam()
    optimizer.build(variables)
    momentums, velocities = private_state.optimizer_slots(optimizer, variables[::-1])
    assert [tuple(slot.shape) for slot in momentums + velocities] == [(3,), (2,), (3,), (2,)]


@pytest.mark.skipif(BACKEND != "jax", reason="only Keras' JAX variables keep a sharding layout")
def test_jax_variables_still_have_a_layout():
    assert hasattr(keras.Variable(np.zeros(2, "float32")), "_layout"), (
        f"Keras {keras.__version__} no longer has `variable._layout`, which kbert.backend.private_state writes"
    )


def test_torch_still_has_the_private_state_kbert_reads():
    torch = pytest.importorskip("torch")
    tensor = torch.zeros(2)
    missing = [name for name, present in (
        ("tensor._base", hasattr(tensor[:1], "_base")),
        ("tensor._version", hasattr(tensor, "_version")),
        ("torch._fused_adam_", hasattr(torch, "_fused_adam_")),
        ("torch._dynamo.config.trace_autograd_ops", hasattr(torch._dynamo.config, "trace_autograd_ops")),
        ("torch._dynamo.config.reorderable_logging_functions",
         hasattr(torch._dynamo.config, "reorderable_logging_functions")),
    ) if not present]
    assert not missing, f"PyTorch {torch.__version__} no longer has {missing}, which kbert.backend.private_state reads"
    version = private_state.tensor_version(tensor)
    tensor.add_(1)
    assert private_state.tensor_version(tensor) == version + 1, "`tensor._version` no longer counts in-place writes"
    assert private_state.tensor_storage_owner(tensor[:1]) is tensor

"""The TensorFlow side of `kbert.backend.ops`: what kbert asks TensorFlow that Keras cannot.

`kbert.backend.ops` picks this module once, on the TensorFlow backend; the
rest of kbert never imports it. TensorFlow is imported inside the functions.
"""

import numpy as np

# Whether a generator's loop is XLA-compiled unless told otherwise (`jit_compile="auto"`).
JIT_COMPILES_BY_DEFAULT = True
# Whether Keras' `fit`, `evaluate` and `predict` hold the variables' values outside the variables.
LOOPS_DETACH_VARIABLES = False


def _tf():
    from kbert.backend.imports import quiet_import

    return quiet_import("tensorflow")


def is_eager_tensor(x):
    """True outside `tf.function` for a tensor with values (`.numpy()`)."""
    return _tf().executing_eagerly() and hasattr(x, "numpy")


def scale_loss_for_replicas(loss):
    """`loss` divided by the replicas in sync under a `tf.distribute` strategy (Keras sums their gradients)."""
    replicas = _tf().distribute.get_strategy().num_replicas_in_sync
    return loss if replicas == 1 else loss / replicas


def replica_total(value):
    """`(Σ value over a `tf.distribute` replica context's replicas, their count)`; `(value, 1)` outside one."""
    context = _tf().distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        return context.all_reduce("sum", value), context.num_replicas_in_sync
    return value, 1


def framework_random_state():
    """Empty: every random draw on TensorFlow goes through Keras' seeds."""
    return np.zeros(0, np.uint8)


def set_framework_random_state(state):
    """Nothing to restore on TensorFlow."""


def fused_attention_supports(dtype):
    """`keras.ops.dot_product_attention` takes every dtype on TensorFlow."""
    return True


def value_and_gradients(fn, xs):
    """`(fn(xs), gradients)` by a `tf.GradientTape`."""
    tf = _tf()
    with tf.GradientTape() as tape:
        tape.watch(xs)
        value = fn(xs)
    return value, tape.gradient(value, xs)


def compile_loop(fn, model, jit_compile, reduce_retracing=True):
    """`fn` as an XLA-compiled `tf.function` (`fn` itself without `jit_compile`).

    `reduce_retracing` lets one trace serve inputs of other shapes (XLA still
    compiles a program per shape); `False` keeps each trace's shapes static.
    """
    if not jit_compile:
        return fn
    return _tf().function(fn, jit_compile=True, reduce_retracing=reduce_retracing)


def compiled_step_method(model, name):
    """`model.<name>`: the whole decoding loop is compiled on TensorFlow, not each step."""
    return getattr(model, name)



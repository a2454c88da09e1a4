"""Backend-aware helpers for the tests (the one place the tests branch on backend)."""

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()


def compile_with_xla(fn):
    """Wrap `fn` in the backend's XLA compiler: `tf.function(jit_compile=True)` or `jax.jit`.

    PyTorch has no XLA path on this machine; the caller's test is skipped there.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    pytest.skip("XLA compilation applies to the TensorFlow and JAX backends only.")


def xla_call(layer, *args, **kwargs):
    """Call a built layer through XLA and return NumPy outputs.

    On JAX the layer runs statelessly (`stateless_call`) inside `jax.jit`.
    """
    if BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def fn(trainable, non_trainable, *args):
            outputs, _ = layer.stateless_call(trainable, non_trainable, *args, **kwargs)
            return outputs

        outputs = jax.jit(fn)(trainable, non_trainable, *args)
    else:
        outputs = compile_with_xla(lambda *a: layer(*a, **kwargs))(*args)
    return keras.tree.map_structure(keras.ops.convert_to_numpy, outputs)


def to_numpy(x):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, x)


def assert_close(actual, expected, atol=1e-5, rtol=0.0):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=atol, rtol=rtol)

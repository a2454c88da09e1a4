"""Importing frameworks quietly and lazily, seeding them, and tracing `tf.data` functions as written.

TensorFlow is imported only where its work is done: under JAX or PyTorch
`import kbert` must not load it (`tests/test_import.py`), and what loads it
there starts it on the CPU alone.
"""

import contextlib
import importlib
import os
import sys


@contextlib.contextmanager
def _stderr_silenced():
    """Send file descriptor 2 to /dev/null for the duration (C-level writes too)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _start_data_only_tensorflow(tf, backend):
    """Under a JAX or PyTorch Keras (`backend`), start TensorFlow (`tf`) on the host alone.

    There TensorFlow only feeds data (`tf.data`, tensorflow-text): hidden from
    the accelerators (GPUs, TPUs) before it starts, it reserves none of their
    memory, which the training backend needs; started in the silence, its
    device probing (CUDA) writes nothing to the console. A TensorFlow started
    already keeps its devices.
    """
    if backend == "tensorflow":
        return
    host = tf.config.get_visible_devices("CPU")
    if len(tf.config.get_visible_devices()) > len(host):  # an accelerator is visible
        with contextlib.suppress(RuntimeError):  # RuntimeError: started already, its devices set up
            tf.config.set_visible_devices(host)
    tf.config.list_logical_devices()


@contextlib.contextmanager
def _quietly():
    """File descriptor 2 silenced; a TensorFlow first imported inside is started there
    (`_start_data_only_tensorflow`)."""
    imported = "tensorflow" in sys.modules
    with _stderr_silenced():
        yield
        if not imported and "tensorflow" in sys.modules and "keras" in sys.modules:
            _start_data_only_tensorflow(sys.modules["tensorflow"], sys.modules["keras"].backend.backend())


def quiet_import(module_name):
    """Import a module with its native start-up logging kept off the console.

    TensorFlow writes start-up lines (oneDNN, CUDA probing) from C++ before its
    log level applies; they are noise to a kbert user. Python errors still
    propagate. Under JAX or PyTorch the TensorFlow it imports sees the CPU alone.

    >>> quiet_import("json").__name__
    'json'
    """
    with _quietly():
        return importlib.import_module(module_name)


def set_random_seed(seed):
    """`keras.utils.set_random_seed`, its import of TensorFlow (to seed it, when installed) kept quiet.

    >>> set_random_seed(0)
    """
    import keras

    with _quietly():
        keras.utils.set_random_seed(seed)


class _LazyModule:
    """Stands in for a module; `quiet_import`s it at the first attribute access."""

    def __init__(self, module_name):
        self._module_name = module_name

    def __getattr__(self, attribute):
        return getattr(quiet_import(self._module_name), attribute)


def lazy_import(module_name):
    """A module-level handle on `module_name` that imports it (quietly) when first used.

    Lets a module that TensorFlow code lives in be imported under JAX or
    PyTorch without loading TensorFlow. Attribute access, unlike a call, is
    not rewritten by AutoGraph, so functions traced by `tf.data` use it freely.

    >>> lazy_import("json").dumps([1])
    '[1]'
    """
    return _LazyModule(module_name)


def traced_as_written(fn):
    """`fn` for `tf.data.Dataset.map`, traced as written: AutoGraph does not rewrite it.

    kbert's dataset functions are TensorFlow operations with no Python control
    flow on tensors, so AutoGraph has nothing to convert; its source
    transformation was most of a pretraining pipeline's start-up (a tiny
    `kbert pretrain` spent about 40% of its time before the first step in it).

    >>> traced_as_written(abs)(-2)
    2
    """
    return quiet_import("tensorflow").autograph.experimental.do_not_convert(fn)

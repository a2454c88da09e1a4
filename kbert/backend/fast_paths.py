"""The process defaults of kbert's backend choices, and the switch over eager PyTorch's fast paths.

Two environment variables set defaults here, read when kbert is imported:
`KBERT_FAST_PATHS=0` turns every PyTorch fast path off (`1` or unset leaves
them on), and `KBERT_JAX_DROPOUT_PRNG` names the generator of dropout's bits
on JAX where a model's own `dropout_prng` is None
(`kbert.backend.jax_ops.dropout_prng`). A model's own choice of attention
kernel (`attention_implementation`) overrides neither: with the
fast paths off, "auto" and "fused" use `keras.ops.dot_product_attention`.
`switched(on)` flips the fast paths for a block of code in this process
(tests run the parity checks both ways with it). The switch is process-wide,
not per thread: flip it between model calls, not during one.

>>> with switched(False):
...     active()
False
"""

import contextlib
import os
import sys

_SWITCH = os.environ.get("KBERT_FAST_PATHS", "1")
if _SWITCH not in ("0", "1"):
    raise ValueError(f"KBERT_FAST_PATHS must be 0 or 1; received {_SWITCH!r}.")
# `positions`: the last cache write's `(index, steps, positions)`, see `torch_ops.write_cache`.
STATE = {"on": _SWITCH == "1", "in_place_cache_writes": False, "positions": None}

# Keras is imported inside the functions: `kbert/__init__` imports this module
# (through `kbert.backend.ops`) before Keras.


def active():
    """Whether kbert takes its PyTorch fast paths now: on the PyTorch backend with the switch on.

    >>> isinstance(active(), bool)
    True
    """
    if not STATE["on"]:
        return False
    import keras

    return keras.backend.backend() == "torch"


@contextlib.contextmanager
def switched(on):
    """Turn every fast path on (`True`) or off (`False`) for the block, then back as it was.

    >>> with switched(False):
    ...     active()
    False
    """
    saved = STATE["on"]
    STATE["on"] = bool(on)
    try:
        yield
    finally:
        STATE["on"] = saved


@contextlib.contextmanager
def in_place_cache_writes():
    """Let cached attention overwrite the key/value caches it is given, for the block.

    A decoding loop that never reads a cache again after passing it on enters
    this: on eager PyTorch a functional cache update copies the whole cache
    at every step, and with this scope `CachedMultiHeadAttention` writes the
    step's keys and values into the cache instead (`kbert.backend.ops.write_cache`).
    XLA (TensorFlow, JAX) reuses a loop's buffers anyway, and with the fast
    paths off the update stays functional.

    >>> with in_place_cache_writes():
    ...     STATE["in_place_cache_writes"]
    True
    """
    saved = STATE["in_place_cache_writes"]
    STATE["in_place_cache_writes"] = True
    try:
        yield
    finally:
        STATE["in_place_cache_writes"] = saved
        STATE["positions"] = None


def writes_caches_in_place():
    """Whether cached attention writes its caches in place now (an `in_place_cache_writes` block, fast paths on).

    >>> writes_caches_in_place()
    False
    """
    return STATE["in_place_cache_writes"] and active()


def compiling():
    """Whether `torch.compile` is tracing the caller (False where torch is not imported).

    kbert's caches write nothing during a trace: once a dict that existed
    before the trace changes, dynamo breaks the graph at the next
    `inspect.Signature.bind` of a Keras layer call ("mapping proxy affected
    by dictionary mutation"; see `kbert.backend.torch_compilation`).

    >>> compiling()
    False
    """
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()

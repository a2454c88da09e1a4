"""The backend-neutral operations that the rest of kbert calls: the one door to the backends.

Layers, models, training, generation, tasks and pretraining call these
functions and never a framework directly (`tests/test_layering.py`). Each
is `keras.ops` code, or asks the backend's own module, picked once by Keras'
backend: `kbert.backend.torch_ops`, `kbert.backend.jax_ops` or
`kbert.backend.tensorflow_ops`. On eager PyTorch the hot operations
(`dense`, `fused_attention`, `reshape`, `rms_normalization`, …) take
`torch_ops`' fast paths while `kbert.backend.fast_paths.active()` says so
(`KBERT_FAST_PATHS=0` turns them off).
"""

import importlib

import keras
import numpy as np

from kbert.backend import fast_paths, jax_ops, torch_ops

# The generators a dropout may draw its bits from on JAX (`dropout`'s `prng`; a model's `dropout_prng`).
DROPOUT_PRNGS = jax_ops.DROPOUT_PRNGS

_BACKEND_MODULES = {"tensorflow": "tensorflow_ops", "jax": "jax_ops", "torch": "torch_ops"}
# Keras' backend's module, picked once, when this module is imported (after Keras: `kbert/__init__`
# imports Keras first). A plain global, which `torch.compile` reads as a constant.
_BACKEND = (importlib.import_module(f"kbert.backend.{_BACKEND_MODULES[keras.backend.backend()]}")
            if keras.backend.backend() in _BACKEND_MODULES else None)


def _on_backend():
    """The module of Keras' backend, `kbert.backend.<backend>_ops`."""
    if _BACKEND is None:
        raise ValueError(f"kbert runs on the tensorflow, jax and torch backends; Keras' is "
                         f"{keras.backend.backend()!r}.")
    return _BACKEND


def is_eager_tensor(x):
    """True when `x` holds concrete values that can be read on the host.

    False inside `tf.function`, `jax.jit`, `torch.compile`, and while Keras
    builds a functional model symbolically.

    >>> is_eager_tensor(np.ones((2,)))
    True
    """
    if isinstance(x, np.ndarray):
        return True
    if keras.backend.is_keras_tensor(x):
        return False
    return _on_backend().is_eager_tensor(x)


def scale_loss_for_replicas(loss):
    """Divide a replica's loss by the replicas in sync under a `tf.distribute` strategy.

    Keras sums the replicas' gradients and multiplies the reported loss back,
    so a model whose `compute_loss` returns its own mean (not a Keras loss
    object's, which are scaled already) must scale it like this to train and
    report the same as on one device. The identity elsewhere (one replica,
    JAX, PyTorch).

    >>> float(scale_loss_for_replicas(np.float32(2.0)))
    2.0
    """
    return _on_backend().scale_loss_for_replicas(loss)


def replica_total(value):
    """`(Σ value over the replicas that train in sync, their count)`; `(value, 1)` on one replica.

    For a loss averaged over a data-dependent count (masked tokens): each
    replica sees its shard of the global batch, and the engine averages (or
    sums, after `scale_loss_for_replicas`) their gradients, so a replica
    must divide its own sum by the global count, times the replicas, for the
    result to be the global batch's mean. A `tf.distribute` replica context
    (TensorFlow) and `torch.distributed` (PyTorch, every process calling)
    sum here; JAX computes one global program (`keras.distribution`), so its
    sums are global already.

    >>> replica_total(np.float32(3.0))
    (np.float32(3.0), 1)
    """
    return _on_backend().replica_total(value)


def few_calls_outputs(model, inputs):
    """`model`'s outputs on one batch `inputs`, as NumPy, for a few calls at one shape (a demo).

    JAX compiles every operation of an eager call for each new shape; one
    compiled call of the whole model (`predict_on_batch`) takes a fraction of
    that time. TensorFlow and PyTorch run the eager call, which compiles nothing.

    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="ones")])
    >>> few_calls_outputs(model, np.ones((1, 2), "float32"))
    array([[2.]], dtype=float32)
    """
    own = getattr(_on_backend(), "few_calls_outputs", None)  # JAX's; the eager call elsewhere
    if own is not None:
        return own(model, inputs)
    return keras.tree.map_structure(keras.ops.convert_to_numpy, model(inputs))


def framework_random_state():
    """What random draws outside Keras' `SeedGenerator`s depend on, as NumPy: PyTorch's generator (its dropout).

    Empty on TensorFlow and JAX, whose random draws all go through Keras' seeds.

    >>> framework_random_state().dtype
    dtype('uint8')
    """
    return _on_backend().framework_random_state()


def set_framework_random_state(state):
    """Restore what `framework_random_state` returned (a no-op on TensorFlow and JAX).

    >>> set_framework_random_state(framework_random_state())
    """
    _on_backend().set_framework_random_state(state)


def value_and_gradients(fn, xs):
    """`(fn(xs), [∂fn/∂x for x in xs])` by the backend's autodiff, as a float and NumPy arrays.

    `fn` maps a list of float tensors to a scalar tensor; `xs` is a list of
    float arrays. Whatever else `fn` reads (a model's weights) is held
    constant. An `x` that `fn` does not use gets a zero gradient.

    >>> value, (gradient,) = value_and_gradients(
    ...     lambda xs: keras.ops.sum(xs[0] ** 2), [np.array([1.0, -2.0], "float32")])
    >>> value, gradient.tolist()
    (5.0, [2.0, -4.0])
    """
    xs = [keras.ops.convert_to_tensor(x) for x in xs]
    value, gradients = _on_backend().value_and_gradients(fn, xs)
    gradients = [
        np.zeros(x.shape, "float32") if g is None else keras.ops.convert_to_numpy(g)
        for x, g in zip(xs, gradients)
    ]
    return float(keras.ops.convert_to_numpy(value)), gradients


def compile_loop(fn, model, jit_compile, reduce_retracing=True):
    """`fn(seed_state, *inputs)` as the backend runs a decoding loop best.

    With `jit_compile`, the whole loop under XLA on TensorFlow
    (`tf.function`; `reduce_retracing` lets one trace serve inputs of other
    shapes) and JAX (`jax.jit`, the model's variables passed as arguments,
    not baked into the program). On PyTorch the loop stays a Python loop,
    run under `torch.no_grad` (its step is compiled by `compiled_step_method`).

    >>> compile_loop(lambda seed, x: x + 1, None, jit_compile=False)(None, 1)
    2
    """
    return _on_backend().compile_loop(fn, model, jit_compile, reduce_retracing)


def jit_compiles_by_default():
    """Whether a decoding loop is compiled unless told otherwise: on TensorFlow and JAX, not PyTorch.

    >>> isinstance(jit_compiles_by_default(), bool)
    True
    """
    return _on_backend().JIT_COMPILES_BY_DEFAULT


def loops_detach_variables():
    """Whether Keras' `fit`, `evaluate` and `predict` take the variables' values out of the variables
    while they run, putting the newest back at the end: JAX's stateless loops (`jax_state_sync`).

    >>> isinstance(loops_detach_variables(), bool)
    True
    """
    return _on_backend().LOOPS_DETACH_VARIABLES


def compiled_step_method(model, name):
    """`model.<name>`, compiled where the backend compiles a decoding loop's step rather than the loop.

    On PyTorch, under `torch.compile`, once per model and method
    (`kbert.backend.torch_compilation.torch_compiled_method`); elsewhere the method as it is.
    """
    return _on_backend().compiled_step_method(model, name)


def compiles_training_steps():
    """Whether kbert compiles a `jit_compile=True` training step itself: PyTorch, as one `torch.compile` graph.

    >>> isinstance(compiles_training_steps(), bool)
    True
    """
    return keras.backend.backend() == "torch"


def predicts_eagerly(model):
    """Whether `model.predict_on_batch` runs operation by operation, so that a batch of a new length compiles
    nothing: PyTorch without `jit_compile` (TensorFlow traces a function per length, JAX compiles one).

    >>> isinstance(predicts_eagerly(object()), bool)
    True
    """
    return keras.backend.backend() == "torch" and not getattr(model, "jit_compile", False)


def tokenizes_on_host():
    """Whether the text-level calls tokenize on the host rather than with TensorFlow ops: every backend but
    TensorFlow's, which has TensorFlow loaded already (`kbert.text.TextPreprocessor`).

    >>> isinstance(tokenizes_on_host(), bool)
    True
    """
    return keras.backend.backend() != "tensorflow"


def compiled_training_step(step, optimizer, variables):
    """Keras' eager training step `step` compiled as one graph where `compiles_training_steps()`.

    See `kbert.backend.torch_compilation.torch_compiled_training_step`.
    """
    from kbert.backend.torch_compilation import torch_compiled_training_step

    return torch_compiled_training_step(step, optimizer, variables)


def dropout(x, rate, seed_generator, prng=None):
    """Inverted dropout of `x` at `rate` (> 0), the mask seeded by `seed_generator`, as Keras' `Dropout` draws it.

    On JAX the bits come from `kbert.backend.jax_ops.dropout_prng(prng)`'s
    generator: `prng`, one of `DROPOUT_PRNGS`, or None for the process
    default (`KBERT_JAX_DROPOUT_PRNG`; threefry, Keras' own, on the CPU).
    Elsewhere `prng` has no effect.

    >>> out = dropout(keras.ops.ones((2, 3)), 0.5, keras.random.SeedGenerator(0))
    >>> sorted(set(keras.ops.convert_to_numpy(out).ravel().tolist())) in ([0.0, 2.0], [0.0], [2.0])
    True
    """
    own = getattr(_on_backend(), "dropout", None)  # JAX's; Keras' own elsewhere
    if own is not None:
        return own(x, rate, seed_generator, prng)
    return keras.random.dropout(x, rate, seed=seed_generator)


def uniform_like(x, seed_generator):
    """Uniform `[0, 1)` draws of `x`'s shape and dtype.

    From `seed_generator` (`keras.random.uniform`); on PyTorch's fast path
    from PyTorch's global generator (`torch_ops.uniform_like`), which keeps a
    compiled step in one graph.

    >>> tuple(uniform_like(keras.ops.zeros((2, 3)), keras.random.SeedGenerator(0)).shape)
    (2, 3)
    """
    if fast_paths.active():
        return torch_ops.uniform_like(x)
    return keras.random.uniform(keras.ops.shape(x), dtype=dtype_name(x), seed=seed_generator)


def masked_score(dtype):
    """The score (or logit) that stands for −∞ where a mask drops it, in `dtype`: large, negative, finite.

    The one value kbert masks with: `−1e9` for float32 (explicit scores and
    logits, whose softmax runs in float32: `exp` of it underflows to 0, and
    sums of a few such values stay finite); `−0.7 ×` float16's largest for
    float16, so that adding it to a score cannot overflow to `−inf` (a row
    with every key masked stays finite, where `−inf` would give NaNs); and
    `−2⁴¹` for bfloat16, JAX's own mask value for cuDNN's attention
    (`get_large_negative_number` in jax/_src/cudnn/fused_attention_stablehlo.py:
    cuDNN mishandles the difference of two values near bfloat16's limit).

    >>> masked_score("float32"), round(masked_score("float16"), 1), masked_score("bfloat16")
    (-1000000000.0, -45852.8, -2199023255552.0)
    """
    if dtype == "float16":
        return -0.7 * float(np.finfo(np.float16).max)
    if dtype == "bfloat16":
        return -float(2**41)
    return -1e9


def positions_from(length, offset):
    """int32 `offset, offset + 1, ..., offset + length - 1`; `offset` a Python int or a scalar tensor.

    A Python offset stays a number: `keras.ops.cast` of it would be a tensor
    made from host data at every call on eager PyTorch.

    >>> keras.ops.convert_to_numpy(positions_from(3, 2)).tolist()
    [2, 3, 4]
    """
    positions = keras.ops.arange(length, dtype="int32")
    if isinstance(offset, int):
        return positions + offset if offset else positions
    return positions + keras.ops.cast(offset, "int32")


def causal_mask(query_length, key_length, offset=0):
    """`True` where query `i` (at position `offset + i`) may attend key `j`: `j <= offset + i`.

    Returns a bool tensor `(1, query_length, key_length)`; `offset` may be a
    scalar tensor (the position of a cached decoding step).

    >>> keras.ops.convert_to_numpy(causal_mask(2, 3, offset=1)).astype(int).tolist()
    [[[1, 1, 0], [1, 1, 1]]]
    """
    query_positions = positions_from(query_length, offset)
    key_positions = keras.ops.arange(key_length, dtype="int32")
    return keras.ops.expand_dims(key_positions[None, :] <= query_positions[:, None], 0)


def with_causal_mask(mask, query_length, key_length):
    """`mask` (bool, broadcastable to `(batch, heads, query, key)`, or None) and query `i` attending keys `j <= i`.

    >>> keras.ops.convert_to_numpy(with_causal_mask(None, 2, 3)).astype(int).tolist()
    [[[[1, 0, 0], [1, 1, 0]]]]
    """
    causal = causal_mask(query_length, key_length)[:, None]
    return causal if mask is None else keras.ops.logical_and(mask, causal)


def as_bool(mask):
    """`mask` (0/1 or bool) as bool, without a cast where it is bool already.

    On PyTorch's fast path, converted once for all the layers that get the
    same mask (`torch_ops.as_bool`).

    >>> keras.ops.convert_to_numpy(as_bool(np.array([0, 1]))).tolist()
    [False, True]
    """
    if dtype_name(mask) == "bool":
        return mask
    if fast_paths.active() and keras.ops.is_tensor(mask):  # not a symbolic KerasTensor
        return torch_ops.as_bool(mask)
    return keras.ops.cast(mask, "bool")


def fused_attention_supports(dtype):
    """Whether `keras.ops.dot_product_attention` compiles for inputs of `dtype` here.

    JAX's XLA attention asks for float32 accumulation of float16 products,
    which XLA's CPU `dot_general` rejects under `jax.jit` ("precision
    'F16_F16_F32' is not supported"); every other backend, dtype and JAX
    platform takes it.

    >>> fused_attention_supports("float32")
    True
    """
    return _on_backend().fused_attention_supports(dtype)


def fused_attention_dropout():
    """Whether `fused_attention` takes a dropout rate: on PyTorch's fast path (SDPA's `dropout_p`).

    >>> isinstance(fused_attention_dropout(), bool)
    True
    """
    return fast_paths.active()


def fused_attention(query, key, value, mask, scale, dropout_rate=0.0, bias=None,
                    key_value_heads_first=False, causal=False):
    """Softmax attention in the backend's fused kernel, in Keras' `(batch, length, heads, head_dim)` layout.

    Computes `softmax(scale · q·kᵀ + bias)·v` over the keys `mask` keeps.
    `mask` is bool, broadcastable to `(batch, heads, query_length,
    key_length)`, True where a key is attended (or None); `bias` (T5's
    relative position bias, or None) is float, broadcastable to the same
    shape. The PyTorch fast path (`kbert.backend.torch_ops.attention`) calls
    `scaled_dot_product_attention` on transposed views without copies, and
    also takes `dropout_rate` (on the probabilities, from PyTorch's
    generator, as Keras' unseeded dropout draws on PyTorch); elsewhere
    `keras.ops.dot_product_attention` has no dropout and `dropout_rate` must
    be 0 (`fused_attention_dropout()`). With `key_value_heads_first`, `key`
    and `value` come as `(batch, heads, length, head_dim)` (a key/value
    cache's layout), which PyTorch's kernel takes as they are. With `causal`,
    query `i` also attends only keys `j <= i` (top-left aligned, as a prompt
    at the start of a cache needs); without a `mask` or `bias` this reaches
    the kernel as its `is_causal` flag, no mask tensor at all, so PyTorch's
    flash kernel stays eligible (as it does with no mask, when nothing is
    padded). Masked scores get `masked_score` of the query's dtype. On JAX a
    mask or bias reaches Keras' attention at the scores' full lengths, which
    cuDNN's flash kernel takes on a GPU (`jax_ops.attention_bias`).

    >>> q = np.ones((1, 3, 2, 4), "float32")
    >>> tuple(fused_attention(q, q, q, None, scale=0.5).shape)
    (1, 3, 2, 4)
    """
    masked = masked_score(dtype_name(query))
    if causal and (mask is not None or bias is not None):  # the kernel takes a flag or a mask, not both
        mask = with_causal_mask(mask, query.shape[1], key.shape[2 if key_value_heads_first else 1])
        causal = False
    if fast_paths.active():
        return torch_ops.attention(query, key, value, bias, scale, dropout_rate,
                                   key_value_heads_first, causal, mask, masked)
    if dropout_rate:
        raise ValueError("fused_attention takes a dropout rate only on PyTorch's fast path.")
    if key_value_heads_first:
        key, value = (keras.ops.transpose(x, (0, 2, 1, 3)) for x in (key, value))
    if mask is not None:  # additive and finite, so a row with every key masked stays finite
        bias = keras.ops.where(mask, 0.0 if bias is None else keras.ops.cast(bias, "float32"), masked)
    if bias is not None:
        bias = keras.ops.cast(bias, query.dtype)
        if keras.backend.backend() == "jax":
            bias = jax_ops.attention_bias(bias, query.shape[1], key.shape[1])
    return keras.ops.dot_product_attention(query, key, value, bias=bias, scale=scale, is_causal=causal)


def write_cache(cache, keys, values, index):
    """`(cache, its keys, its values)`: `cache` `(batch, heads, 2, length, key_dim)` with `keys` and
    `values` `(batch, heads, steps, key_dim)` written from position `index`, and its two halves.

    Inside `kbert.backend.fast_paths.in_place_cache_writes()` (a decoding loop)
    on PyTorch the cache itself is overwritten (`torch_ops.write_cache`), where
    a functional update copies the whole cache at every step; XLA (TensorFlow,
    JAX) already reuses a loop's buffer, so elsewhere the update stays functional.

    >>> cache = np.zeros((1, 1, 2, 3, 1), "float32")
    >>> new = np.ones((1, 1, 1, 1), "float32")
    >>> keras.ops.convert_to_numpy(write_cache(cache, new, new, 1)[1]).ravel().tolist()
    [0.0, 1.0, 0.0]
    """
    if fast_paths.writes_caches_in_place():
        return (cache, *torch_ops.write_cache(cache, keys, values, index))
    update = keras.ops.cast(keras.ops.stack([keys, values], axis=2), cache.dtype)
    cache = keras.ops.slice_update(cache, [0, 0, 0, index, 0], update)
    return cache, cache[:, :, 0], cache[:, :, 1]


def column_writer(offset):
    """`(tokens, index, ids) -> tokens` with `ids` `(rows,)` written at column `offset + index`.

    On PyTorch's fast path in place (a decoding loop never reads its buffer's
    old value again), elsewhere `slice_update`, whose start is made of
    tensors built once: on eager PyTorch a Python number or list in a step is
    a host-to-device copy at every step.

    >>> write = column_writer(1)
    >>> tokens = keras.ops.zeros((1, 3), "int32")
    >>> index = keras.ops.convert_to_tensor(1, "int32")  # a tensor, as a decoding loop's step is
    >>> keras.ops.convert_to_numpy(write(tokens, index, keras.ops.ones((1,), "int32"))).tolist()
    [[0, 0, 1]]
    """
    if fast_paths.active():
        return lambda tokens, index, ids: torch_ops.write_column(tokens, index + offset, ids)
    first_column, column_step = (keras.ops.convert_to_tensor(i, "int32") for i in ([0, offset], [0, 1]))

    def write_column(tokens, index, ids):
        start = keras.ops.add(first_column, keras.ops.multiply(column_step, index))
        return keras.ops.slice_update(tokens, start, keras.ops.expand_dims(ids, 1))

    return write_column


def call_directly(layer, args, kwargs):
    """`(layer.call(*args, **kwargs),)` where Keras' `Layer.__call__` would change nothing, else None.

    Only on PyTorch's fast path (`torch_ops.call_directly`, whose conditions
    `kbert.layers.DirectCall` states); None everywhere else.

    >>> call_directly(keras.layers.Dense(1), (np.ones((1, 2), "float32"),), {}) is None  # not built
    True
    """
    if fast_paths.active():
        return torch_ops.call_directly(layer, args, kwargs)
    return None


def fused_adam_available():
    """Whether `fused_adam` runs here: on PyTorch's fast path (eager, or traced by `torch.compile`).

    >>> isinstance(fused_adam_available(), bool)
    True
    """
    return fast_paths.active()


def fused_adam(variables, gradients, momentums, velocities, step, learning_rate, betas, epsilon):
    """One Adam update of every variable in place, where `fused_adam_available()`; gradients cast as needed.

    Eager, PyTorch's fused kernel; under `torch.compile`, a few `torch._foreach_*` operations over every variable.

    See `kbert.backend.torch_ops.fused_adam`.
    """
    torch_ops.fused_adam(variables, gradients, momentums, velocities, step, learning_rate, betas, epsilon)


def host_numpy(value):
    """A tensor or variable's value as NumPy, a JAX array replicated over several processes included.

    >>> host_numpy(np.ones(2, "float32"))
    array([1., 1.], dtype=float32)
    """
    value = getattr(value, "value", value)
    if hasattr(value, "is_fully_addressable") and not value.is_fully_addressable:
        if not value.is_fully_replicated:
            raise ValueError("A variable sharded over several processes cannot be read on one.")
        value = value.addressable_data(0)
    return keras.ops.convert_to_numpy(value)


def constant_tensors(owner, tables, *sizes):
    """`owner.<tables>(*sizes)`'s NumPy arrays (a tuple) as tensors: index tables that depend on shapes only.

    `sizes` are Python ints (the static shapes the tables depend on). On
    eager PyTorch each conversion of host data is a host-to-device copy,
    which on a GPU waits for the stream; a layer's index tables (BigBird's
    key blocks, Longformer's window) are the same at every call of the same
    shape, so the fast path keeps them, weakly keyed by `owner`, under
    `(tables, *sizes)`. Under `torch.compile` the method runs outside the
    trace (Dynamo would trace its NumPy, and break the graph at a random
    draw) and its tensors enter the graph as constants. Traced by
    TensorFlow or JAX they are converted at each trace, as constants of the
    program.

    >>> layer = type("Layer", (), {"tables": lambda self, n: (np.arange(n),)})()
    >>> [np.asarray(a).tolist() for a in constant_tensors(layer, "tables", 2)]
    [[0, 1]]
    """
    sizes = tuple(int(size) for size in sizes)
    if fast_paths.active() or fast_paths.compiling():
        return torch_ops.kept_constants(owner, tables, sizes)
    return tuple(keras.ops.convert_to_tensor(array) for array in getattr(owner, tables)(*sizes))


def pad(x, widths, value=0):
    """`keras.ops.pad(x, widths, constant_values=value)`: `widths` one `(before, after)` pair per axis.

    Keras' `pad` makes a new `Operation` (with a unique name) at every call,
    eager too; under `torch.compile` that write to Keras' name registry
    breaks the graph at the next Keras layer call. On PyTorch's fast path
    it is `torch.nn.functional.pad`.

    >>> keras.ops.convert_to_numpy(pad(keras.ops.convert_to_tensor([[1, 2]]), [(0, 0), (1, 2)])).tolist()
    [[0, 1, 2, 0, 0]]
    """
    if fast_paths.active():
        return torch_ops.pad(x, widths, value)
    return keras.ops.pad(x, widths, constant_values=value)


def clip(x, low, high):
    """`keras.ops.clip(x, low, high)` for Python-number bounds, which on PyTorch's fast path stay numbers.

    Keras' PyTorch `clip` turns each bound into a tensor (a host-to-device
    copy at every call, every step of an LSTM); `torch.clamp` takes them as
    they are.

    >>> np.asarray(clip(np.array([-2.0, 0.5, 3.0], "float32"), -1.0, 1.0)).tolist()
    [-1.0, 0.5, 1.0]
    """
    if fast_paths.active():
        return torch_ops.clip(x, low, high)
    return keras.ops.clip(x, low, high)


def dense(inputs, kernel, bias, kernel_transposed=False):
    """`inputs @ kernel + bias` (`bias` may be None), with the bias added inside the matmul on PyTorch.

    Keras' `Dense` adds its bias in a second pass over the output; PyTorch's
    `addmm` folds it into the matmul (`kbert.torch_ops.dense`), which
    saves that pass: about 1.5% of a bert_base forward on the CPU. TensorFlow
    and JAX fuse the add under XLA anyway. With `kernel_transposed`, `kernel`
    is stored `(out, in)` (an embedding table as the output projection) and
    the product is `inputs @ kernelᵀ`.

    >>> import numpy as np
    >>> x, w, b = np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.arange(4.0, dtype="float32")
    >>> np.asarray(dense(x, w, b))[0].tolist()
    [3.0, 4.0, 5.0, 6.0]
    """
    if fast_paths.active():
        return torch_ops.dense(inputs, kernel, bias, kernel_transposed)
    if kernel_transposed:
        kernel = keras.ops.transpose(kernel)
    outputs = keras.ops.matmul(inputs, kernel)
    return outputs if bias is None else keras.ops.add(outputs, bias)


def take_rows(table, ids):
    """`keras.ops.take(table, ids, axis=0)` for ids in range: one `embedding` operator on PyTorch's fast path.

    >>> np.asarray(take_rows(np.eye(3, dtype="float32"), np.array([2, 0]))).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    if fast_paths.active():
        return torch_ops.take_rows(table, ids)
    return keras.ops.take(table, ids, axis=0)


def take_indices(x, indices, axis):
    """`keras.ops.take(x, indices, axis)` for int indices in range; a scalar index keeps the axis (as `[index]`).

    One `index_select` on PyTorch's fast path, where Keras' `take` wraps
    negative indices first (4 more operators, each a kernel launch on a GPU).

    >>> np.asarray(take_indices(np.arange(6).reshape(2, 3), np.array(2, "int32"), axis=1)).tolist()
    [[2], [5]]
    """
    if fast_paths.active():
        return torch_ops.take_indices(x, indices, axis)
    if len(keras.ops.shape(indices)) == 0:
        indices = keras.ops.reshape(indices, (1,))
    return keras.ops.take(x, indices, axis=axis)


def reshape(x, shape):
    """`keras.ops.reshape(x, shape)`, without its per-call checks on PyTorch's fast path.

    On PyTorch `keras.ops.reshape` validates the shape and walks it for
    symbolic tensors, which matters where a decoding step splits and merges
    heads dozens of times. TensorFlow and JAX trace it once.

    >>> tuple(reshape(np.ones((2, 6), "float32"), (2, 3, 2)).shape)
    (2, 3, 2)
    """
    if fast_paths.active():
        return torch_ops.reshape(x, shape)
    return keras.ops.reshape(x, shape)


def rms_normalization(x, scale, epsilon, dtype):
    """`x / sqrt(mean(x², last axis) + epsilon) · scale`, computed in float32 at least, returned as `dtype`.

    `keras.ops.rms_normalization` and a cast, as Keras computes it; PyTorch's
    fast path calls its fused `rms_norm` without Keras' per-call dtype resolution.

    >>> x, scale = np.array([[3.0, 4.0]], "float32"), np.ones(2, "float32")
    >>> np.asarray(rms_normalization(x, scale, 0.0, "float32"), "float64").round(3).tolist()
    [[0.849, 1.131]]
    """
    if fast_paths.active():
        return torch_ops.rms_normalization(x, scale, epsilon, dtype)
    normalized = keras.ops.rms_normalization(x, scale, axis=-1, epsilon=epsilon)
    return keras.ops.cast(normalized, dtype)


def layer_normalization(x, gamma, beta, epsilon, dtype):
    """`(x − mean) / sqrt(variance + epsilon) · gamma + beta` over the last axis, returned as `dtype`.

    `keras.ops.layer_normalization` (in float32 at least) and a cast, as
    Keras' `LayerNormalization` computes it; PyTorch's fast path calls its
    fused `layer_norm` without Keras' per-call dtype resolution and argument
    conversions. `gamma` and `beta` may be None.

    >>> x = np.array([[1.0, 3.0]], "float32")
    >>> np.asarray(layer_normalization(x, None, None, 0.0, "float32")).tolist()
    [[-1.0, 1.0]]
    """
    if fast_paths.active():
        return torch_ops.layer_normalization(x, gamma, beta, epsilon, dtype)
    normalized = keras.ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=epsilon)
    return keras.ops.cast(normalized, dtype)


def dtype_name(x):
    """The standardized dtype name of a tensor or array, cached per dtype object.

    `keras.backend.standardize_dtype(x.dtype)`, which costs a few microseconds
    a call, read where a per-call check of a dtype would cost more than the op.

    >>> dtype_name(np.ones(2, "float32"))
    'float32'
    """
    if x.dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[x.dtype]
    name = keras.backend.standardize_dtype(x.dtype)
    if not fast_paths.compiling():  # no cache write in a trace (see `torch_ops.compiling`)
        _DTYPE_NAMES[x.dtype] = name
    return name


_DTYPE_NAMES = {}

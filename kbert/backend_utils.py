"""The one place where kbert asks the backend framework something Keras cannot.

Keras has no public way to tell a concrete (eager) tensor from a traced one, and
kbert needs that to validate values (ids inside the vocabulary) only where they
can be read without breaking compilation. Each backend gets one branch here.

It also holds the few hot operations (`dense`, `fused_attention`, `reshape`,
`rms_normalization`, …) in their backend-neutral form, `keras.ops` code; on
PyTorch each asks `kbert.torch_fast_paths` for its fast path first (which
its off switch, `KBERT_FAST_PATHS=0`, turns off).
"""

import contextlib
import importlib
import os

import numpy as np

from kbert import torch_fast_paths

# Keras is imported inside the functions: `kbert/__init__` must be able to
# import this module before Keras (and with it TensorFlow) is loaded.


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


def quiet_import(module_name):
    """Import a module with its native start-up logging kept off the console.

    TensorFlow writes start-up lines (oneDNN, CUDA probing) from C++ before its
    log level applies; they are noise to a kbert user. Python errors still
    propagate.

    >>> quiet_import("json").__name__
    'json'
    """
    with _stderr_silenced():
        return importlib.import_module(module_name)


def set_random_seed(seed):
    """`keras.utils.set_random_seed`, its import of TensorFlow (to seed it, when installed) kept quiet.

    >>> set_random_seed(0)
    """
    import keras

    with _stderr_silenced():
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


def is_eager_tensor(x):
    """True when `x` holds concrete values that can be read on the host.

    False inside `tf.function`, `jax.jit`, `torch.compile`, and while Keras
    builds a functional model symbolically.

    >>> is_eager_tensor(np.ones((2,)))
    True
    """
    import keras

    if isinstance(x, np.ndarray):
        return True
    if keras.backend.is_keras_tensor(x):
        return False
    backend = keras.backend.backend()
    if backend == "tensorflow":
        tf = quiet_import("tensorflow")
        return tf.executing_eagerly() and hasattr(x, "numpy")
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        if torch_fast_paths.compiling():
            return False
        return isinstance(x, torch.Tensor) and not x.is_meta
    return False


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
    import keras

    if keras.backend.backend() != "tensorflow":
        return loss
    tf = quiet_import("tensorflow")
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas == 1:
        return loss
    return loss / replicas


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
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        tf = quiet_import("tensorflow")
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            return context.all_reduce("sum", value), context.num_replicas_in_sync
    elif backend == "torch":
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            total = value.detach().clone()
            dist.all_reduce(total)
            return total, dist.get_world_size()
    return value, 1


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
    import keras

    if keras.backend.backend() == "jax":
        return model.predict_on_batch(inputs)
    return keras.tree.map_structure(keras.ops.convert_to_numpy, model(inputs))


def host_numpy(value):
    """A tensor or variable's value as NumPy, a JAX array replicated over several processes included.

    >>> host_numpy(np.ones(2, "float32"))
    array([1., 1.], dtype=float32)
    """
    import keras

    value = getattr(value, "value", value)
    if hasattr(value, "is_fully_addressable") and not value.is_fully_addressable:
        if not value.is_fully_replicated:
            raise ValueError("A variable sharded over several processes cannot be read on one.")
        value = value.addressable_data(0)
    return keras.ops.convert_to_numpy(value)


def framework_random_state():
    """What random draws outside Keras' `SeedGenerator`s depend on, as NumPy: PyTorch's generator (its dropout).

    Empty on TensorFlow and JAX, whose random draws all go through Keras' seeds.

    >>> framework_random_state().dtype
    dtype('uint8')
    """
    import keras

    if keras.backend.backend() != "torch":
        return np.zeros(0, np.uint8)
    import torch

    return torch.get_rng_state().numpy()


def set_framework_random_state(state):
    """Restore what `framework_random_state` returned (a no-op on TensorFlow and JAX).

    >>> set_framework_random_state(framework_random_state())
    """
    import keras

    if keras.backend.backend() == "torch":
        import torch

        torch.set_rng_state(torch.from_numpy(state))


def fused_attention_supports(dtype):
    """Whether `keras.ops.dot_product_attention` compiles for inputs of `dtype` here.

    JAX's XLA attention asks for float32 accumulation of float16 products,
    which XLA's CPU `dot_general` rejects under `jax.jit` ("precision
    'F16_F16_F32' is not supported"); every other backend, dtype and JAX
    platform takes it.

    >>> fused_attention_supports("float32")
    True
    """
    import keras

    if keras.backend.backend() != "jax" or keras.backend.standardize_dtype(dtype) != "float16":
        return True
    import jax

    return jax.default_backend() != "cpu"


def masked_score(dtype):
    """The additive bias of a masked attention score in `dtype`: large, negative and finite.

    `-0.7` times the largest float16 or float32 (by `dtype`), so that adding
    it to a score cannot overflow to `-inf` (a row with every key masked stays
    finite, where `-inf` would give NaNs).

    >>> round(masked_score("float16"), 1)
    -45852.8
    """
    return -0.7 * float(np.finfo(np.float16 if dtype == "float16" else np.float32).max)


# JAX's own cuDNN attention masks bf16 scores with -2**41, not a value near bf16's limit: cuDNN
# mishandles the difference of two such values (`get_large_negative_number` in
# jax/_src/cudnn/fused_attention_stablehlo.py). A padding bias reaches cuDNN on a GPU.
CUDNN_BFLOAT16_MASKED_SCORE = -float(2**41)


def fused_attention(query, key, value, mask, scale, dropout_rate=0.0, bias=None,
                    key_value_heads_first=False, causal=False):
    """Softmax attention in the backend's fused kernel, in Keras' `(batch, length, heads, head_dim)` layout.

    Computes `softmax(scale · q·kᵀ + bias)·v` over the keys `mask` keeps.
    `mask` is bool, broadcastable to `(batch, heads, query_length,
    key_length)`, True where a key is attended (or None); `bias` (T5's
    relative position bias, or None) is float, broadcastable to the same
    shape. The PyTorch fast path (`kbert.torch_fast_paths.attention`) calls
    `scaled_dot_product_attention` on transposed views without copies, and
    also takes `dropout_rate` (on the probabilities, from PyTorch's
    generator, as Keras' unseeded dropout draws on PyTorch); elsewhere
    `keras.ops.dot_product_attention` has no dropout and `dropout_rate` must be 0.
    With `key_value_heads_first`, `key` and `value` come as `(batch, heads,
    length, head_dim)` (a key/value cache's layout), which PyTorch's kernel
    takes as they are. With `causal`, query `i` also attends only keys `j <=
    i` (top-left aligned, as a prompt at the start of a cache needs); without
    a `mask` or `bias` this reaches the kernel as its `is_causal` flag, no
    mask tensor at all, so PyTorch's flash kernel stays eligible (as it does
    with no mask, when nothing is padded). On JAX a mask or bias reaches
    Keras' attention at the scores' full lengths, which cuDNN's flash kernel
    takes on a GPU (`_scores_long_bias`).

    >>> import numpy as np
    >>> q = np.ones((1, 3, 2, 4), "float32")
    >>> tuple(fused_attention(q, q, q, None, scale=0.5).shape)
    (1, 3, 2, 4)
    """
    import keras

    masked = masked_score(dtype_name(query))
    if causal and (mask is not None or bias is not None):  # the kernel takes a flag or a mask, not both
        rows, columns = query.shape[1], key.shape[2 if key_value_heads_first else 1]
        lower = keras.ops.tril(keras.ops.ones((rows, columns), "bool"))
        mask = lower if mask is None else keras.ops.logical_and(mask, lower)
        causal = False
    if torch_fast_paths.active():
        return torch_fast_paths.attention(query, key, value, bias, scale, dropout_rate,
                                          key_value_heads_first, causal, mask, masked)
    if dropout_rate:
        raise ValueError("fused_attention takes a dropout rate only on PyTorch's fast path.")
    if key_value_heads_first:
        key, value = (keras.ops.transpose(x, (0, 2, 1, 3)) for x in (key, value))
    jax_backend = keras.backend.backend() == "jax"
    if mask is not None:  # additive and finite, so a row with every key masked stays finite
        if jax_backend and dtype_name(query) == "bfloat16":
            masked = CUDNN_BFLOAT16_MASKED_SCORE
        bias = keras.ops.where(mask, 0.0 if bias is None else keras.ops.cast(bias, "float32"), masked)
    if bias is not None:
        bias = keras.ops.cast(bias, query.dtype)
        if jax_backend:
            bias = _scores_long_bias(bias, query.shape[1], key.shape[1])
    return keras.ops.dot_product_attention(query, key, value, bias=bias, scale=scale, is_causal=causal)


def _scores_long_bias(bias, query_length, key_length):
    """`bias` (4-D) broadcast to the scores' `(query_length, key_length)` in its last two axes. JAX only.

    On a GPU, Keras' JAX `dot_product_attention` takes cuDNN's flash kernel
    only where JAX's `check_layout` accepts the bias, and that wants both
    lengths in full: a padding mask's `(batch, 1, 1, keys)` bias sends it
    to XLA's attention, which materializes the scores in float32 (25 GB for
    bert_base at 16,384 tokens). Broadcast, the bias costs `batch ×
    query_length × key_length` values (8 MB for a 256 × 128 bf16 batch).
    """
    import keras

    shape = (1,) * (4 - len(bias.shape)) + tuple(bias.shape)
    if shape[2:] == (query_length, key_length):
        return bias
    return keras.ops.broadcast_to(bias, (*shape[:2], query_length, key_length))


def constant_tensors(owner, key, make):
    """`make()`'s NumPy arrays (a tuple) as tensors, converted once per `owner` and `key` on eager PyTorch.

    On eager PyTorch each conversion of host data is a host-to-device copy,
    which on a GPU waits for the stream; a layer's index tables (BigBird's
    key blocks, Longformer's window) are the same at every call of the same
    shape, so the fast path keeps them, weakly keyed by `owner`, under `key`
    (the shapes they depend on). Traced (TensorFlow, JAX, `torch.compile`) they are
    converted at each trace, as constants of the program.

    >>> layer = type("Layer", (), {})()
    >>> [np.asarray(a).tolist() for a in constant_tensors(layer, 1, lambda: (np.arange(2),))]
    [[0, 1]]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.kept_constants(owner, key, make)
    return tuple(keras.ops.convert_to_tensor(array) for array in make())


def clip(x, low, high):
    """`keras.ops.clip(x, low, high)` for Python-number bounds, which on PyTorch's fast path stay numbers.

    Keras' PyTorch `clip` turns each bound into a tensor (a host-to-device
    copy at every call, every step of an LSTM); `torch.clamp` takes them as
    they are.

    >>> np.asarray(clip(np.array([-2.0, 0.5, 3.0], "float32"), -1.0, 1.0)).tolist()
    [-1.0, 0.5, 1.0]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.clip(x, low, high)
    return keras.ops.clip(x, low, high)




def dense(inputs, kernel, bias, kernel_transposed=False):
    """`inputs @ kernel + bias` (`bias` may be None), with the bias added inside the matmul on PyTorch.

    Keras' `Dense` adds its bias in a second pass over the output; PyTorch's
    `addmm` folds it into the matmul (`kbert.torch_fast_paths.dense`), which
    saves that pass: about 1.5% of a bert_base forward on the CPU. TensorFlow
    and JAX fuse the add under XLA anyway. With `kernel_transposed`, `kernel`
    is stored `(out, in)` (an embedding table as the output projection) and
    the product is `inputs @ kernelᵀ`.

    >>> import numpy as np
    >>> x, w, b = np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.arange(4.0, dtype="float32")
    >>> np.asarray(dense(x, w, b))[0].tolist()
    [3.0, 4.0, 5.0, 6.0]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.dense(inputs, kernel, bias, kernel_transposed)
    if kernel_transposed:
        kernel = keras.ops.transpose(kernel)
    outputs = keras.ops.matmul(inputs, kernel)
    return outputs if bias is None else keras.ops.add(outputs, bias)


def take_rows(table, ids):
    """`keras.ops.take(table, ids, axis=0)` for ids in range: one `embedding` operator on PyTorch's fast path.

    >>> np.asarray(take_rows(np.eye(3, dtype="float32"), np.array([2, 0]))).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.take_rows(table, ids)
    return keras.ops.take(table, ids, axis=0)


def take_indices(x, indices, axis):
    """`keras.ops.take(x, indices, axis)` for int indices in range; a scalar index keeps the axis (as `[index]`).

    One `index_select` on PyTorch's fast path, where Keras' `take` wraps
    negative indices first (4 more operators, each a kernel launch on a GPU).

    >>> np.asarray(take_indices(np.arange(6).reshape(2, 3), np.array(2, "int32"), axis=1)).tolist()
    [[2], [5]]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.take_indices(x, indices, axis)
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
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.reshape(x, shape)
    return keras.ops.reshape(x, shape)


def rms_normalization(x, scale, epsilon, dtype):
    """`x / sqrt(mean(x², last axis) + epsilon) · scale`, computed in float32 at least, returned as `dtype`.

    `keras.ops.rms_normalization` and a cast, as Keras computes it; PyTorch's
    fast path calls its fused `rms_norm` without Keras' per-call dtype resolution.

    >>> x, scale = np.array([[3.0, 4.0]], "float32"), np.ones(2, "float32")
    >>> np.asarray(rms_normalization(x, scale, 0.0, "float32"), "float64").round(3).tolist()
    [[0.849, 1.131]]
    """
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.rms_normalization(x, scale, epsilon, dtype)
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
    import keras

    if torch_fast_paths.active():
        return torch_fast_paths.layer_normalization(x, gamma, beta, epsilon, dtype)
    normalized = keras.ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=epsilon)
    return keras.ops.cast(normalized, dtype)


def dtype_name(x):
    """The standardized dtype name of a tensor or array, cached per dtype object.

    `keras.backend.standardize_dtype(x.dtype)`, which costs a few microseconds
    a call, read where a per-call check of a dtype would cost more than the op.

    >>> dtype_name(np.ones(2, "float32"))
    'float32'
    """
    import keras

    if x.dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[x.dtype]
    name = keras.backend.standardize_dtype(x.dtype)
    if not torch_fast_paths.compiling():  # no cache write in a trace (see `torch_fast_paths.compiling`)
        _DTYPE_NAMES[x.dtype] = name
    return name


_DTYPE_NAMES = {}


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
    import keras

    xs = [keras.ops.convert_to_tensor(x) for x in xs]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        tf = quiet_import("tensorflow")
        with tf.GradientTape() as tape:
            tape.watch(xs)
            value = fn(xs)
        gradients = tape.gradient(value, xs)
    elif backend == "jax":
        import jax

        value, gradients = jax.value_and_grad(fn)(xs)
    elif backend == "torch":
        import torch

        xs = [x.detach().requires_grad_(True) for x in xs]
        value = fn(xs)
        gradients = torch.autograd.grad(value, xs, allow_unused=True)
    else:
        raise ValueError(f"No gradients on the {backend!r} backend.")
    gradients = [
        np.zeros(x.shape, "float32") if g is None else keras.ops.convert_to_numpy(g)
        for x, g in zip(xs, gradients)
    ]
    return float(keras.ops.convert_to_numpy(value)), gradients


JAX_DROPOUT_PRNGS = ("threefry", "philox4x32", "rbg", "unsafe_rbg")


def jax_dropout_prng():
    """The PRNG kbert's dropout draws its bits from on JAX, one of `JAX_DROPOUT_PRNGS`.

    `KBERT_JAX_DROPOUT_PRNG` names it; unset, it is `rbg` on a GPU or TPU
    and `threefry` on the CPU: both draw the same masks over a sharded batch
    as on one device, so that a run on several devices equals one device's
    (`philox4x32` does not compile sharded). `threefry` is JAX's default
    and what Keras' `Dropout` draws: 20 rounds of 32-bit integer arithmetic
    per pair of words (rolled into a loop on the CPU), and a bert_base
    training step of 256 × 128 tokens draws 1.23 billion words (every
    dropout mask, attention probabilities included). `philox4x32` makes four
    words from 10 rounds of multiplications and gives the same bits on CPU,
    GPU and TPU (JAX's `jax.random` documentation); one bert_base layer's
    attention-probability dropout runs 2–4× faster than threefry's on
    this project's CPU (`benchmarks/jax_step_anatomy.py`). But JAX 0.10
    cannot partition its `mulhi` over a sharded batch (the compilation
    fails), so under a `keras.distribution` it is refused. `rbg` and
    `unsafe_rbg` draw from XLA's `RngBitGenerator` (the fastest on TPU, per
    JAX's documentation; their bits differ by platform; `rbg` seeds its key
    through threefry, a few words a draw). A CPU timing is no GPU timing:
    `benchmarks/accelerator.py` compares them on one. JAX's global
    `jax_default_prng_impl` cannot make this choice: Keras hands JAX raw
    two-word threefry keys, which an `rbg` default rejects.

    >>> jax_dropout_prng() in JAX_DROPOUT_PRNGS
    True
    """
    import keras

    distributed = keras.distribution.distribution() is not None
    choice = os.environ.get("KBERT_JAX_DROPOUT_PRNG")
    if choice is None:
        import jax

        return "rbg" if jax.default_backend() in ("gpu", "tpu") else "threefry"
    if choice not in JAX_DROPOUT_PRNGS:
        raise ValueError(f"KBERT_JAX_DROPOUT_PRNG must be one of {JAX_DROPOUT_PRNGS}; "
                         f"received {choice!r}.")
    if choice == "philox4x32" and distributed:
        raise ValueError("KBERT_JAX_DROPOUT_PRNG=philox4x32 does not compile under a "
                         "keras.distribution (JAX cannot partition it); use threefry, rbg or unsafe_rbg.")
    return choice


def jax_dropout(x, rate, seed, prng):
    """Inverted dropout of `x` at `rate`, its mask drawn with JAX's `prng` implementation. JAX only.

    `seed` is a Keras seed (two `uint32` words, as a `SeedGenerator` gives):
    the key itself of `threefry` and `philox4x32`; `rbg`'s four words are
    drawn from it through threefry (as JAX seeds an `rbg` key). The same
    seed drops the same entries. Kept
    entries are scaled by `1 / (1 - rate)`, as Keras' `Dropout` does.

    >>> out = jax_dropout(np.ones((2, 3), "float32"), 0.5, np.array([0, 7], "uint32"), "philox4x32")
    >>> sorted(set(np.asarray(out).ravel().tolist())) in ([0.0, 2.0], [0.0], [2.0])
    True
    """
    import jax
    import jax.numpy as jnp

    seed = jnp.asarray(seed, "uint32")
    impl = "threefry2x32" if prng == "threefry" else prng
    key_shape = jax.random.key_data(jax.random.key(0, impl=impl)).shape
    if key_shape != seed.shape:  # rbg's 4 words, from the seed through threefry
        seed = jax.random.bits(jax.random.wrap_key_data(seed, impl="threefry2x32"), key_shape, jnp.uint32)
    key = jax.random.wrap_key_data(seed, impl=impl)
    keep = 1.0 - rate
    kept = jax.random.bernoulli(key, keep, jnp.shape(x))
    return jax.lax.select(kept, x / keep, jnp.zeros_like(x))

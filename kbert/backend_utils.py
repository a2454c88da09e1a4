"""The one place where kbert asks the backend framework something Keras cannot.

Keras has no public way to tell a concrete (eager) tensor from a traced one, and
kbert needs that to validate values (ids inside the vocabulary) only where they
can be read without breaking compilation. Each backend gets one branch here.

It also holds the few hot operations (`dense`, `fused_attention`, `reshape`,
`rms_normalization`) that call PyTorch directly: on eager PyTorch, Keras'
per-call dispatch (a search for symbolic tensors, shape and dtype checks)
costs 5–100 µs an op, more than the op itself in a decoding step. TensorFlow
and JAX trace them once, through `keras.ops`.
"""

import contextlib
import importlib
import os
import sys
import weakref

import numpy as np

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

        if torch.compiler.is_compiling():
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


def fused_attention(query, key, value, mask, scale, dropout_rate=0.0, bias=None,
                    key_value_heads_first=False, causal=False):
    """Softmax attention in the backend's fused kernel, in Keras' `(batch, length, heads, head_dim)` layout.

    Computes `softmax(scale · q·kᵀ + bias)·v` over the keys `mask` keeps.
    `mask` is bool, broadcastable to `(batch, heads, query_length,
    key_length)`, True where a key is attended (or None); `bias` (T5's
    relative position bias, or None) is float, broadcastable to the same
    shape. On PyTorch this calls
    `torch.nn.functional.scaled_dot_product_attention` on transposed views,
    as transformers does: `keras.ops.dot_product_attention` copies query, key
    and value into contiguous `(batch, heads, length, head_dim)` tensors
    first, and its output then needs a fourth copy to merge the heads (48
    copies of a 3 MB tensor per bert_base forward). PyTorch's kernel also
    takes `dropout_rate` (on the probabilities, from PyTorch's generator, as
    Keras' unseeded dropout draws on PyTorch); on TensorFlow and JAX,
    `keras.ops.dot_product_attention` has no dropout and `dropout_rate` must be 0.
    With `key_value_heads_first`, `key` and `value` come as `(batch, heads,
    length, head_dim)` (a key/value cache's layout), which PyTorch's kernel
    takes as they are. With `causal`, query `i` also attends only keys `j <=
    i` (top-left aligned, as a prompt at the start of a cache needs); without
    a `mask` or `bias` this reaches the kernel as its `is_causal` flag, no
    mask tensor at all, so PyTorch's flash kernel stays eligible (as it does
    with no mask, when nothing is padded).

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
    if keras.backend.backend() != "torch":
        if dropout_rate:
            raise ValueError("fused_attention takes a dropout rate only on PyTorch.")
        if key_value_heads_first:
            key, value = (keras.ops.transpose(x, (0, 2, 1, 3)) for x in (key, value))
        if mask is not None:  # additive and finite, so a row with every key masked stays finite
            bias = keras.ops.where(mask, 0.0 if bias is None else keras.ops.cast(bias, "float32"), masked)
        if bias is not None:
            bias = keras.ops.cast(bias, query.dtype)
        return keras.ops.dot_product_attention(query, key, value, bias=bias, scale=scale,
                                               is_causal=causal)
    import torch

    query, key, value = (_torch_tensor(x) for x in (query, key, value))
    query = torch.transpose(query, 1, 2)
    if not key_value_heads_first:
        key, value = (torch.transpose(x, 1, 2) for x in (key, value))
    if mask is not None:
        if bias is None:
            bias = torch.zeros((), dtype=torch.float32, device=query.device)
        bias = torch.where(_torch_tensor(mask), _torch_tensor(bias).float(), masked)
    if bias is not None:
        bias = _torch_tensor(bias).to(query.dtype)
    context = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=bias, dropout_p=dropout_rate, scale=scale, is_causal=causal
    )
    return torch.transpose(context, 1, 2)


def constant_tensors(owner, key, make):
    """`make()`'s NumPy arrays (a tuple) as tensors, converted once per `owner` and `key` on eager PyTorch.

    On eager PyTorch each conversion of host data is a host-to-device copy,
    which on a GPU waits for the stream; a layer's index tables (BigBird's
    key blocks, Longformer's window) are the same at every call of the same
    shape, so they are kept, weakly keyed by `owner`, under `key` (the shapes
    they depend on). Traced (TensorFlow, JAX, `torch.compile`) they are
    converted at each trace, as constants of the program.

    >>> layer = type("Layer", (), {})()
    >>> [np.asarray(a).tolist() for a in constant_tensors(layer, 1, lambda: (np.arange(2),))]
    [[0, 1]]
    """
    import keras

    eager_torch = keras.backend.backend() == "torch" and not torch_compiling()
    kept = _CONSTANTS.setdefault(owner, {}) if eager_torch else {}
    if key in kept:
        return kept[key]
    tensors = tuple(keras.ops.convert_to_tensor(array) for array in make())
    # Keras infers output shapes on PyTorch by calling layers on the "meta"
    # device: tensors made there hold no values and are not kept.
    if eager_torch and all(tensor.device.type != "meta" for tensor in tensors):
        kept[key] = tensors
    return tensors


def torch_compiling():
    """Whether `torch.compile` is tracing the caller (False on other backends; torch is not imported).

    kbert's caches write nothing during a trace: once a dict that existed
    before the trace changes, dynamo breaks the graph at the next
    `inspect.Signature.bind` of a Keras layer call ("mapping proxy affected
    by dictionary mutation"; see `kbert.torch_compilation`).

    >>> torch_compiling()
    False
    """
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_CONSTANTS = weakref.WeakKeyDictionary()  # owner -> {key: tensors}


def clip(x, low, high):
    """`keras.ops.clip(x, low, high)` for Python-number bounds, which on PyTorch stay numbers.

    Keras' PyTorch `clip` turns each bound into a tensor (a host-to-device
    copy at every call, every step of an LSTM); `torch.clamp` takes them as
    they are.

    >>> np.asarray(clip(np.array([-2.0, 0.5, 3.0], "float32"), -1.0, 1.0)).tolist()
    [-1.0, 0.5, 1.0]
    """
    import keras

    if keras.backend.backend() == "torch":
        import torch

        return torch.clamp(_torch_tensor(x), float(low), float(high))
    return keras.ops.clip(x, low, high)


def torch_fused_adam(variables, gradients, momentums, velocities, step, learning_rate, betas, epsilon):
    """One Adam update of every variable in PyTorch's fused kernel, in place. PyTorch only.

    The kernel is `torch.optim.Adam(fused=True)`'s: one pass over each
    tensor instead of Keras' chain of `torch._foreach_*` calls, which on the
    CPU run tensor by tensor with a temporary per stage (1.1 s against 0.04 s
    for a bert_base update on 2 cores). Its rule: `m ← β1·m + (1−β1)·g`,
    `v ← β2·v + (1−β2)·g²`, `w ← w − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)`.
    `step` is `t`, a float32 scalar tensor; the kernel takes one list per
    device and dtype, so variables are grouped by both.
    """
    import torch

    groups = {}
    for tensors in zip(variables, gradients, momentums, velocities):
        groups.setdefault((tensors[0].device, tensors[0].dtype), []).append(tensors)
    for group in groups.values():
        params, grads, exp_avgs, exp_avg_sqs = (list(tensors) for tensors in zip(*group))
        torch._fused_adam_(
            params, grads, exp_avgs, exp_avg_sqs, [], [step] * len(params),
            lr=learning_rate, beta1=betas[0], beta2=betas[1], weight_decay=0.0, eps=epsilon,
            amsgrad=False, maximize=False,
        )


def dense(inputs, kernel, bias, kernel_transposed=False):
    """`inputs @ kernel + bias` (`bias` may be None), with the bias added inside the matmul on PyTorch.

    Keras' `Dense` adds its bias in a second pass over the output; PyTorch's
    `linear` folds it into the matmul (`addmm`), which saves that pass: about
    1.5% of a bert_base forward on the CPU. TensorFlow and JAX fuse the add
    under XLA anyway. With `kernel_transposed`, `kernel` is stored `(out, in)`
    (an embedding table as the output projection) and the product is
    `inputs @ kernelᵀ`.

    >>> import numpy as np
    >>> x, w, b = np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.arange(4.0, dtype="float32")
    >>> np.asarray(dense(x, w, b))[0].tolist()
    [3.0, 4.0, 5.0, 6.0]
    """
    import keras

    if keras.backend.backend() == "torch":
        import torch

        # `mm`/`addmm` on a 2-D view with an `(in, out)` operand, as transformers'
        # `Conv1D`: `linear` would add a transposed view of each weight per call.
        inputs, kernel = _torch_tensor(inputs), _torch_tensor(kernel)
        operand = matmul_operand(inputs, kernel, kernel_transposed)
        flat = inputs if inputs.dim() == 2 else inputs.reshape(-1, inputs.shape[-1])
        if bias is None:
            outputs = torch.mm(flat, operand)
        else:
            outputs = torch.addmm(_torch_tensor(bias), flat, operand)
        return outputs if inputs.dim() == 2 else outputs.view(*inputs.shape[:-1], operand.shape[1])
    if kernel_transposed:
        kernel = keras.ops.transpose(kernel)
    outputs = keras.ops.matmul(inputs, kernel)
    return outputs if bias is None else keras.ops.add(outputs, bias)


def take_rows(table, ids):
    """`keras.ops.take(table, ids, axis=0)` for ids in range: one `embedding` operator on PyTorch.

    Keras' PyTorch `take` wraps negative indices first (4 more operators a
    call, each a kernel launch on a GPU); kbert checks its ids are in range
    where it reads them (`kbert.input_checks`).

    >>> np.asarray(take_rows(np.eye(3, dtype="float32"), np.array([2, 0]))).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    import keras

    if keras.backend.backend() != "torch":
        return keras.ops.take(table, ids, axis=0)
    import torch

    ids = _torch_tensor(ids)
    if ids.dtype not in (torch.int32, torch.int64):
        ids = ids.to(torch.int32)
    return torch.nn.functional.embedding(ids, _torch_tensor(table))


FEW_ROWS = 16
WIDE_OUTPUT = 8192


def matmul_operand(inputs, kernel, kernel_transposed=False):
    """The `(in, out)` right operand of `inputs @ kernel`, laid out as a few-row matmul reads it fastest. PyTorch only.

    `kernel` is stored `(in, out)`, or `(out, in)` with `kernel_transposed`
    (an embedding table as the output projection). The operand is a view of
    `kernel`, except in eager inference on at most `FEW_ROWS` rows (a
    decoding step), where reading the weight is all the time a matmul takes
    and its layout matters: a layer's kernel is read as a contiguous `(out,
    in)`, a vocabulary projection (more than `WIDE_OUTPUT` outputs) as a
    contiguous `(in, out)`. Reading weights from memory, a matmul of 8 rows
    on this project's 2-core CPU (MKL) read t5_small's 512 × 2048 kernel
    10–20% faster as `(out, in)`, and the vocabulary projections of t5_small
    (512 × 32128) and GPT-2 (768 × 50257) 20–50% faster as `(in, out)`; the
    best layout is the CPU's to decide (GPT-2's 768-wide kernels read faster
    `(in, out)` there), and `benchmarks/few_row_layouts.py` measures it.
    Where a parameter is stored the other way, a transposed contiguous copy
    is kept until the parameter changes, at the cost of its memory as long as
    it lives; the operand made of it is kept too, so a call dispatches no
    view of the weight.
    """
    import torch

    operand = kernel.T if kernel_transposed else kernel
    rows = inputs.numel() // max(inputs.shape[-1], 1)
    if (rows > FEW_ROWS or not isinstance(kernel, torch.nn.Parameter) or kernel.dim() != 2
            or torch.is_grad_enabled() or torch.compiler.is_compiling()):
        return operand
    wide = operand.shape[1] > WIDE_OUTPUT
    if wide != kernel_transposed:  # stored as it is read best
        return operand
    return _transposed_operand(kernel, wide)


def _transposed_operand(parameter, wide):
    """The `(in, out)` operand read from a contiguous copy of `parameter.T`: the copy itself
    (`wide`) or its transpose; cached until `parameter` changes or goes. PyTorch only."""
    cached = _LINEAR_WEIGHTS.get(id(parameter))
    if cached is None or cached[0]() is not parameter:
        weakref.finalize(parameter, _LINEAR_WEIGHTS.pop, id(parameter), None)
        cached = None
    if cached is None or cached[1] != parameter._version:  # new, or updated in place since
        copy = parameter.detach().T.contiguous()
        cached = (weakref.ref(parameter), parameter._version, copy if wide else copy.T)
        _LINEAR_WEIGHTS[id(parameter)] = cached
    return cached[2]


# id(parameter) -> (weak reference to it, its version when copied, the operand read from the copy)
_LINEAR_WEIGHTS = {}


def reshape(x, shape):
    """`keras.ops.reshape(x, shape)`, without its per-call checks on eager PyTorch.

    On PyTorch `keras.ops.reshape` validates the shape and walks it for
    symbolic tensors: about 100 µs a call, against 2 µs for `torch.reshape`,
    which matters where a decoding step splits and merges heads dozens of
    times. TensorFlow and JAX trace it once.

    >>> tuple(reshape(np.ones((2, 6), "float32"), (2, 3, 2)).shape)
    (2, 3, 2)
    """
    import keras

    if keras.backend.backend() == "torch":
        import torch

        return torch.reshape(_torch_tensor(x), tuple(shape))
    return keras.ops.reshape(x, shape)


def rms_normalization(x, scale, epsilon, dtype):
    """`x / sqrt(mean(x², last axis) + epsilon) · scale`, computed in float32 at least, returned as `dtype`.

    `keras.ops.rms_normalization` and a cast, as Keras computes it (PyTorch's
    fused `rms_norm` there), without Keras' per-call dtype resolution on
    eager PyTorch (about 100 µs a call against 20 µs of work in a decoding step).

    >>> x, scale = np.array([[3.0, 4.0]], "float32"), np.ones(2, "float32")
    >>> np.asarray(rms_normalization(x, scale, 0.0, "float32"), "float64").round(3).tolist()
    [[0.849, 1.131]]
    """
    import keras

    if keras.backend.backend() != "torch":
        normalized = keras.ops.rms_normalization(x, scale, axis=-1, epsilon=epsilon)
        return keras.ops.cast(normalized, dtype)
    import torch

    return _torch_normalization(torch.nn.functional.rms_norm, x, (scale,), epsilon, dtype)


def layer_normalization(x, gamma, beta, epsilon, dtype):
    """`(x − mean) / sqrt(variance + epsilon) · gamma + beta` over the last axis, returned as `dtype`.

    `keras.ops.layer_normalization` (in float32 at least; PyTorch's fused
    `layer_norm` there) and a cast, as Keras' `LayerNormalization` computes
    it, without its per-call dtype resolution and argument conversions on
    eager PyTorch (about 200 Python calls a call). `gamma` and `beta` may be None.

    >>> x = np.array([[1.0, 3.0]], "float32")
    >>> np.asarray(layer_normalization(x, None, None, 0.0, "float32")).tolist()
    [[-1.0, 1.0]]
    """
    import keras

    if keras.backend.backend() != "torch":
        normalized = keras.ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=epsilon)
        return keras.ops.cast(normalized, dtype)
    import torch

    return _torch_normalization(torch.nn.functional.layer_norm, x, (gamma, beta), epsilon, dtype)


def _torch_normalization(normalize, x, weights, epsilon, dtype):
    """PyTorch's `normalize(x, (width,), *weights, epsilon)` over the last axis in float32 at
    least (`weights` may hold None), returned as `dtype`. PyTorch only."""
    import torch

    x = _torch_tensor(x)
    compute_dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    weights = [None if w is None else _torch_tensor(w).to(compute_dtype) for w in weights]
    # int(): a constant width when traced (the ONNX export of `kbert export`).
    normalized = normalize(x.to(compute_dtype), (int(x.shape[-1]),), *weights, epsilon)
    return normalized.to(torch_dtype(dtype))


def _torch_tensor(x):
    """`x` as a PyTorch tensor: itself, a Keras variable's value, or an array converted. PyTorch only.

    Skips `keras.ops.convert_to_tensor`'s search for symbolic tensors (5–12 µs a
    call) on the tensors and variables that kbert's layers pass on eager PyTorch.
    """
    import keras
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, keras.Variable):
        return x.value
    return keras.ops.convert_to_tensor(x)


def torch_dtype(name):
    """The PyTorch dtype of a Keras dtype name (cached per name). PyTorch only.

    The cache is not written while `torch.compile` traces (`torch_compiling`).
    """
    if name not in _TORCH_DTYPES:
        import keras
        import torch

        dtype = getattr(torch, keras.backend.standardize_dtype(name))
        if torch_compiling():
            return dtype
        _TORCH_DTYPES[name] = dtype
    return _TORCH_DTYPES[name]


_TORCH_DTYPES = {}


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
    if not torch_compiling():  # no cache write in a trace (see `torch_compiling`)
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

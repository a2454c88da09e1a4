"""kbert's eager PyTorch fast paths: the PyTorch side of `kbert.backend.ops`.

On eager PyTorch, Keras' per-call dispatch (a search for symbolic tensors,
shape and dtype checks, a layer's bookkeeping) costs 5–100 µs a call, more
than the op itself in a decoding step; TensorFlow and JAX trace `keras.ops`
once. Each function here is the PyTorch version of something kbert also
computes through plain `keras.ops`, to the same numbers. Only
`kbert.backend.ops` calls them, when `kbert.backend.fast_paths.active()`
says so (docs/architecture.md §5). PyTorch is imported inside the functions.
"""

import inspect
import sys
import weakref

from kbert.backend.fast_paths import STATE as _STATE
from kbert.backend.fast_paths import compiling
from kbert.backend.private_state import (
    fused_adam_kernel,
    rematerialized,
    tensor_storage_owner,
    tensor_version,
)


def write_cache(cache, keys, values, index):
    """`keys` and `values` `(batch, heads, steps, key_dim)` written in place into `cache` `(batch,
    heads, 2, length, key_dim)` from position `index`; returns the cache's key and value halves.

    `index` is a Python int or a scalar tensor. The positions written are
    made once for all the layers of a step: each layer gets the same `index`
    tensor, and the positions of the last one are kept (not while
    `compiling`: a trace that reads or writes them would guard on them).
    """
    import torch

    steps, tracing = keys.shape[2], compiling()
    last = None if tracing else _STATE["positions"]
    if last is not None and last[0] is index and last[1] == steps:
        positions = last[2]
    elif isinstance(index, int):
        positions = torch.arange(index, index + steps, device=cache.device)
    else:
        positions = index.reshape(1) if steps == 1 else torch.arange(steps, device=cache.device) + index
        positions = positions.long()  # `index_copy_` takes int64 positions only
        if not tracing:
            _STATE["positions"] = (index, steps, positions)
    halves = []
    for slot, update in enumerate((keys, values)):
        half = cache[:, :, slot]  # each taken after the previous write (autograd's view rules)
        halves.append(half.index_copy_(2, positions, update.to(cache.dtype)))
    return halves


def uniform_like(x):
    """Uniform `[0, 1)` draws of `x`'s shape, dtype and device from PyTorch's global generator.

    Keras' seeded PyTorch draws build a `torch.Generator` on the host at each
    call from a seed read back from the device (a wait on the stream per
    call), in a function Keras keeps out of `torch.compile`
    (`torch.compiler.disable`: dynamo cannot trace generators,
    pytorch/pytorch#88576), which splits a compiled step there. The global
    generator is the one Keras' unseeded PyTorch dropout draws from:
    `keras.utils.set_random_seed` seeds it, and a resumable run saves its state.
    """
    import torch

    return torch.rand_like(x)


def write_column(buffer, column, values):
    """`values` `(rows,)` written in place into column `column` (a scalar tensor) of `buffer` `(rows, columns)`.

    A decoding loop's own token buffer, which it never reads again after
    writing: Keras' `slice_update` builds the index grid and copies the buffer
    (17 operators a step, against 3).
    """
    buffer.index_copy_(1, column.reshape(1).long(), values.unsqueeze(1))
    return buffer


def take_indices(x, indices, axis):
    """`torch.index_select` along `axis` of `indices` (a scalar taken as one index; more axes through
    a flat view): Keras' `take` wraps negative indices first (4 more operators)."""
    import torch

    x, indices = _torch_tensor(x), _torch_tensor(indices)
    if indices.dim() <= 1:
        return torch.index_select(x, axis, indices if indices.dim() == 1 else indices.reshape(1))
    taken = torch.index_select(x, axis, indices.reshape(-1))
    return taken.view(*x.shape[:axis], *indices.shape, *x.shape[axis + 1:])


def attention(query, key, value, bias, scale, dropout_rate, key_value_heads_first, causal, mask=None,
              masked=None):
    """`torch.nn.functional.scaled_dot_product_attention` on transposed views, in Keras' layout.

    Takes and returns `(batch, length, heads, head_dim)` (keys and values
    `(batch, heads, length, head_dim)` with `key_value_heads_first`), as
    transformers does: `keras.ops.dot_product_attention` copies query, key
    and value into contiguous `(batch, heads, length, head_dim)` tensors
    first, and its output then needs a fourth copy to merge the heads (48
    copies of a 3 MB tensor per bert_base forward). `mask` (bool, True where
    a key is attended) becomes part of the additive `bias`, `masked` (finite)
    elsewhere; `dropout_rate` applies to the probabilities, from PyTorch's
    generator. The contract is `kbert.backend.ops.fused_attention`'s.
    """
    import torch

    query, key, value = (_torch_tensor(x) for x in (query, key, value))
    query = torch.transpose(query, 1, 2)
    if not key_value_heads_first:
        key, value = (torch.transpose(x, 1, 2) for x in (key, value))
    bias = None if bias is None else _torch_tensor(bias)
    if mask is not None:
        mask = _torch_tensor(mask)
        bias = memoized("additive_mask", mask, (bias, masked, query.dtype),
                        lambda: _additive_mask(mask, bias, masked, query.dtype))
    elif bias is not None:
        bias = bias.to(query.dtype)
    context = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=bias, dropout_p=dropout_rate, scale=scale, is_causal=causal
    )
    return torch.transpose(context, 1, 2)


def _additive_mask(mask, bias, masked, dtype):
    """`bias` (or 0) where `mask` is True, `masked` elsewhere, computed in float32, returned as `dtype`."""
    import torch

    if bias is None:
        bias = torch.zeros((), dtype=torch.float32, device=mask.device)
    return torch.where(mask, bias.float(), masked).to(dtype)


def as_bool(mask):
    """`mask` (0/1) as bool, converted once for all the layers that get the same mask (see `memoized`)."""
    mask = _torch_tensor(mask)
    return memoized("bool", mask, (), lambda: mask.bool())


def memoized(kind, tensor, extras, make):
    """`make()`, a function of `tensor` and `extras`, computed once for the layers of a call.

    Every attention layer of a forward or a decoding step turns the same
    mask into the same additive bias (transformers builds it once, before
    the layers); here the first layer's result is kept and the next layers'
    calls with the same view of the same tensor, unchanged since (its
    version counter), and the same `extras` (tensors by identity) get it.
    It is kept while the tensor that owns `tensor`'s memory lives (the
    step's or the call's mask), one result per `kind` and owner. Not where
    an extra needs gradients (the result would hold its graph), under
    `torch.compile`, or on the "meta" device (no memory to tell tensors apart).
    """
    import torch

    if (tensor.device.type == "meta" or compiling()
            or any(isinstance(e, torch.Tensor) and e.requires_grad for e in extras)):
        return make()
    owner = tensor_storage_owner(tensor)
    slot = _MEMO.get((kind, id(owner)))
    if slot is None or slot[0]() is not owner:
        key = (kind, id(owner))
        slot = (weakref.ref(owner, lambda _, key=key: _MEMO.pop(key, None)), {})
        _MEMO[key] = slot
    view = (tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor_version(tensor),
            tuple(tensor_version(e) if isinstance(e, torch.Tensor) else e for e in extras))
    kept = slot[1].get(view)
    if kept is not None and all(a is b or not isinstance(a, torch.Tensor) for a, b in zip(kept[0], extras)):
        return kept[1]
    result = make()
    slot[1].clear()
    slot[1][view] = (extras, result)
    return result


_MEMO = {}  # (kind, id(owner)) -> (weak reference to the owner, {view: (extras, result)})


def kept_constants(owner, tables, sizes):
    """`owner.<tables>(*sizes)`'s NumPy arrays as tensors, converted once per owner, method and sizes.

    The contract is `kbert.backend.ops.constant_tensors`'. Under
    `torch.compile`, Dynamo calls `_host_constants` as it is, outside the
    trace (`torch.compiler.assume_constant_result`), and puts its tensors in
    the graph as constants.
    """
    if compiling():  # copies: Dynamo guards on nothing it made a constant (Keras' tree functions ask its type)
        return tuple(tensor.clone() for tensor in _host_constants(owner, tables, *sizes))
    kept = _CONSTANTS.setdefault(owner, {})
    key = (tables, *sizes)
    if key in kept:
        return kept[key]
    tensors = _host_constants(owner, tables, *sizes)
    # Keras infers output shapes on PyTorch by calling layers on the "meta"
    # device: tensors made there hold no values and are not kept.
    if all(tensor.device.type != "meta" for tensor in tensors):
        kept[key] = tensors
    return tensors


def _constant_for_dynamo(function):
    """`function`, marked as returning constants for Dynamo (`torch.compiler.assume_constant_result`).

    Where PyTorch is Keras' backend, torch is imported with Keras, before
    this module; elsewhere nothing compiles with Dynamo, and `function` stays as it is.
    """
    torch = sys.modules.get("torch")
    return torch.compiler.assume_constant_result(function) if torch is not None else function


@_constant_for_dynamo
def _host_constants(owner, tables, *sizes):
    import keras

    return tuple(keras.ops.convert_to_tensor(array) for array in getattr(owner, tables)(*sizes))


_CONSTANTS = weakref.WeakKeyDictionary()  # owner -> {key: tensors}


def pad(x, widths, value):
    """`torch.nn.functional.pad` with NumPy's `widths` (one `(before, after)` pair per axis, first axis first)."""
    import torch

    flat = [size for before_after in reversed(list(widths)) for size in before_after]
    return torch.nn.functional.pad(x, flat, value=value)


def clip(x, low, high):
    """`torch.clamp` with Python-number bounds: Keras' `clip` makes each bound a tensor (a host copy a call)."""
    import torch

    return torch.clamp(_torch_tensor(x), float(low), float(high))


def fused_adam(variables, gradients, momentums, velocities, step, learning_rate, betas, epsilon):
    """One Adam update of every variable, in place: PyTorch's fused kernel, or `torch._foreach_*` ops traced.

    The kernel is `torch.optim.Adam(fused=True)`'s: one pass over each
    tensor instead of Keras' chain of `torch._foreach_*` calls, which on the
    CPU run tensor by tensor with a temporary per stage (1.1 s against 0.04 s
    for a bert_base update on 2 cores). Its rule: `m ← β1·m + (1−β1)·g`,
    `v ← β2·v + (1−β2)·g²`, `w ← w − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)`.
    `step` is `t`, a float32 scalar tensor; the kernel takes one list per
    device and dtype, so variables are grouped by both. Under
    `torch.compile` (`compiling()`) the kernel has no fake implementation
    for a tensor learning rate on the CPU, so the same rule is traced as a
    few `torch._foreach_*` operations over all the variables (what
    `torch.optim`'s compiled Adam traces, and what inductor fuses), not one
    chain of Keras operations per variable: Dynamo's tracing of a tiny
    classifier's training step took 252 s with the chains, on a loaded machine.
    """
    gradients = [_torch_tensor(g).to(dtype=w.dtype, device=w.device) for g, w in zip(gradients, variables)]
    groups = {}
    for tensors in zip(variables, gradients, momentums, velocities):
        groups.setdefault((tensors[0].device, tensors[0].dtype), []).append(tensors)
    update = _traced_adam if compiling() else _fused_adam
    for group in groups.values():
        update(*(list(tensors) for tensors in zip(*group)), step, learning_rate, betas, epsilon)


def _fused_adam(params, grads, exp_avgs, exp_avg_sqs, step, learning_rate, betas, epsilon):
    fused_adam_kernel()(
        params, grads, exp_avgs, exp_avg_sqs, [], [step] * len(params),
        lr=learning_rate, beta1=betas[0], beta2=betas[1], weight_decay=0.0, eps=epsilon,
        amsgrad=False, maximize=False,
    )


def _traced_adam(params, grads, exp_avgs, exp_avg_sqs, step, learning_rate, betas, epsilon):
    import torch

    beta_1, beta_2 = betas
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta_1)
    torch._foreach_mul_(exp_avg_sqs, beta_2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta_2)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denominators, torch.sqrt(1 - torch.pow(beta_2, step)))
    torch._foreach_add_(denominators, epsilon)
    updates = torch._foreach_div(exp_avgs, denominators)
    torch._foreach_mul_(updates, learning_rate / (1 - torch.pow(beta_1, step)))
    torch._foreach_sub_(params, updates)


def dense(inputs, kernel, bias, kernel_transposed=False):
    """`inputs @ kernel + bias` as one `mm`/`addmm` on a 2-D view with an `(in, out)` operand.

    The bias goes inside the matmul (Keras' `Dense` adds it in a second pass),
    and no transposed view of the weight is made per call, as transformers'
    `Conv1D`; the operand comes from `matmul_operand`. The contract is
    `kbert.backend.ops.dense`'.
    """
    import torch

    inputs, kernel = _torch_tensor(inputs), _torch_tensor(kernel)
    operand = matmul_operand(inputs, kernel, kernel_transposed)
    flat = inputs if inputs.dim() == 2 else inputs.reshape(-1, inputs.shape[-1])
    if bias is None:
        outputs = torch.mm(flat, operand)
    else:
        outputs = torch.addmm(_torch_tensor(bias), flat, operand)
    return outputs if inputs.dim() == 2 else outputs.view(*inputs.shape[:-1], operand.shape[1])


FEW_ROWS = 16
WIDE_OUTPUT = 8192


def matmul_operand(inputs, kernel, kernel_transposed=False):
    """The `(in, out)` right operand of `inputs @ kernel`, laid out as a few-row matmul reads it fastest.

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
            or torch.is_grad_enabled() or compiling()):
        return operand
    wide = operand.shape[1] > WIDE_OUTPUT
    if wide != kernel_transposed:  # stored as it is read best
        return operand
    return _transposed_operand(kernel, wide)


def _transposed_operand(parameter, wide):
    """The `(in, out)` operand read from a contiguous copy of `parameter.T`: the copy itself
    (`wide`) or its transpose; cached until `parameter` changes or goes."""
    cached = _LINEAR_WEIGHTS.get(id(parameter))
    if cached is None or cached[0]() is not parameter:
        weakref.finalize(parameter, _LINEAR_WEIGHTS.pop, id(parameter), None)
        cached = None
    if cached is None or cached[1] != tensor_version(parameter):  # new, or updated in place since
        copy = parameter.detach().T.contiguous()
        cached = (weakref.ref(parameter), tensor_version(parameter), copy if wide else copy.T)
        _LINEAR_WEIGHTS[id(parameter)] = cached
    return cached[2]


# id(parameter) -> (weak reference to it, its version when copied, the operand read from the copy)
_LINEAR_WEIGHTS = {}


def take_rows(table, ids):
    """One `embedding` op: Keras' `take` wraps negative indices first (4 more ops a call).

    kbert checks its ids are in range where it reads them (`kbert.input_checks`).
    """
    import torch

    ids = _torch_tensor(ids)
    if ids.dtype not in (torch.int32, torch.int64):
        ids = ids.to(torch.int32)
    return torch.nn.functional.embedding(ids, _torch_tensor(table))


def reshape(x, shape):
    """`torch.reshape`: `keras.ops.reshape` validates the shape and walks it for symbolic
    tensors (about 100 µs a call, against 2 µs)."""
    import torch

    return torch.reshape(_torch_tensor(x), tuple(shape))


def rms_normalization(x, scale, epsilon, dtype):
    """PyTorch's fused `rms_norm` in float32 at least, returned as `dtype`, without Keras'
    per-call dtype resolution (about 100 µs a call against 20 µs of work in a decoding step)."""
    import torch

    return _normalization(torch.nn.functional.rms_norm, x, (scale,), epsilon, dtype)


def layer_normalization(x, gamma, beta, epsilon, dtype):
    """PyTorch's fused `layer_norm` in float32 at least, returned as `dtype`, without Keras'
    dtype resolution and argument conversions (about 200 Python calls a call); `gamma`, `beta` may be None."""
    import torch

    return _normalization(torch.nn.functional.layer_norm, x, (gamma, beta), epsilon, dtype)


def _normalization(normalize, x, weights, epsilon, dtype):
    """`normalize(x, (width,), *weights, epsilon)` over the last axis in float32 at least
    (`weights` may hold None), returned as `dtype`."""
    import torch

    x = _torch_tensor(x)
    compute_dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    weights = [None if w is None else _torch_tensor(w).to(compute_dtype) for w in weights]
    # int(): a constant width when traced (the ONNX export of `kbert export`).
    normalized = normalize(x.to(compute_dtype), (int(x.shape[-1]),), *weights, epsilon)
    return normalized.to(torch_dtype(dtype))


def _torch_tensor(x):
    """`x` as a PyTorch tensor: itself, a Keras variable's value, or an array converted.

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
    """The PyTorch dtype of a Keras dtype name (cached per name, not while `compiling`)."""
    if name not in _TORCH_DTYPES:
        import keras
        import torch

        dtype = getattr(torch, keras.backend.standardize_dtype(name))
        if compiling():
            return dtype
        _TORCH_DTYPES[name] = dtype
    return _TORCH_DTYPES[name]


_TORCH_DTYPES = {}


def call_directly(layer, args, kwargs):
    """`layer.call(*args, **kwargs)` where Keras' `Layer.__call__` would change nothing, else None.

    `kbert.layers.DirectCall` states when that holds: built, no autocast or
    quantization, no activity regularizer or rematerialization, a PyTorch
    first input Keras would not convert, an explicit `training` where `call`
    takes one (one `call` takes none gets no `training`).
    """
    import keras

    if not layer.built or not args or not keras.ops.is_tensor(args[0]):  # NumPy, a KerasTensor
        return None
    takes_training = _call_takes_training(type(layer))
    input_dtype = _direct_input_dtype(layer)
    if (
        input_dtype is None
        or (args[0].dtype != input_dtype and args[0].dtype.is_floating_point)
        or layer.activity_regularizer is not None
        or rematerialized(layer)
        or ("training" not in kwargs and takes_training)
    ):
        return None
    if "training" in kwargs and not takes_training:
        kwargs = {name: value for name, value in kwargs.items() if name != "training"}
    return (layer.call(*args, **kwargs),)


def _direct_input_dtype(layer):
    """The PyTorch dtype of the layer's float inputs where its dtype policy allows a direct call, else None.

    A direct call needs no autocast (compute dtype = variable dtype) and no
    quantized call. Kept in the layer's `__dict__` (outside Keras' and
    PyTorch's attribute tracking) until its dtype policy object changes
    (`quantize()` and a new `dtype_policy` both replace it; a
    `DTypePolicyMap`, which changes in place, is read afresh each call):
    reading the policy's dtypes costs more than the rest of the check.
    Not kept while `torch.compile` traces (`compiling`).
    """
    import keras

    policy = layer.dtype_policy
    cached = layer.__dict__.get("_direct_input_dtype")
    if cached is not None and cached[0] is policy:
        return cached[1]
    allowed = layer.compute_dtype == layer.variable_dtype and layer.quantization_mode is None
    input_dtype = torch_dtype(layer.input_dtype) if allowed else None
    if not isinstance(policy, keras.dtype_policies.DTypePolicyMap) and not compiling():
        layer.__dict__["_direct_input_dtype"] = (policy, input_dtype)
    return input_dtype


_TAKES_TRAINING = {}


def _call_takes_training(layer_class):
    """Whether `layer_class.call` has a `training` argument (cached per class, not while `compiling`)."""
    if layer_class in _TAKES_TRAINING:
        return _TAKES_TRAINING[layer_class]
    takes_training = "training" in inspect.signature(layer_class.call).parameters
    if not compiling():
        _TAKES_TRAINING[layer_class] = takes_training
    return takes_training


# What `kbert.backend.ops` asks every backend module (beside the fast paths above).

# Whether a generator's loop is compiled unless told otherwise (`jit_compile="auto"`): on
# PyTorch the loop stays a Python loop, and `torch.compile` of its step is asked for.
JIT_COMPILES_BY_DEFAULT = False
# Whether Keras' `fit`, `evaluate` and `predict` hold the variables' values outside the variables.
LOOPS_DETACH_VARIABLES = False


def is_eager_tensor(x):
    """True for a PyTorch tensor with values: not while `torch.compile` traces, not on the "meta" device."""
    import torch

    if compiling():
        return False
    return isinstance(x, torch.Tensor) and not x.is_meta


def scale_loss_for_replicas(loss):
    """The loss as it is: `torch.distributed` data parallelism averages the replicas' gradients."""
    return loss


def replica_total(value):
    """`(Σ value over the `torch.distributed` processes, their count)`, every process calling; `(value, 1)` alone."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        total = value.detach().clone()
        dist.all_reduce(total)
        return total, dist.get_world_size()
    return value, 1


def framework_random_state():
    """PyTorch's global generator's state (what Keras' unseeded dropout and `uniform_like` draw from)."""
    import torch

    return torch.get_rng_state().numpy()


def set_framework_random_state(state):
    """Restore what `framework_random_state` returned."""
    import torch

    torch.set_rng_state(torch.from_numpy(state))


def fused_attention_supports(dtype):
    """`scaled_dot_product_attention` takes every float dtype."""
    return True


def value_and_gradients(fn, xs):
    """`(fn(xs), gradients)` by `torch.autograd.grad` (None for an `x` that `fn` does not use)."""
    import torch

    xs = [x.detach().requires_grad_(True) for x in xs]
    value = fn(xs)
    return value, torch.autograd.grad(value, xs, allow_unused=True)


def compile_loop(fn, model, jit_compile, reduce_retracing=True):
    """`fn` under `torch.no_grad`: the loop stays a Python loop (its step is compiled by `compiled_step_method`)."""
    import torch

    def no_grad(*args):
        with torch.no_grad():
            return fn(*args)

    return no_grad


def compiled_step_method(model, name):
    """`model.<name>` under `torch.compile` (`kbert.backend.torch_compilation.torch_compiled_method`)."""
    from kbert.backend.torch_compilation import torch_compiled_method

    return torch_compiled_method(model, name)



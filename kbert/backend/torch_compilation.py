"""`torch.compile` for kbert's training steps and decoding steps (PyTorch only).

Keras compiles its PyTorch training step with `torch.compile` as it is,
and dynamo breaks that step into several graphs; the decoding loops call
a model's per-step method many times with shapes that change from call to
call. The wrappers here make each one graph and keep recompilations rare
(docs/architecture.md, "Compiled training and generation on PyTorch").
"""

import functools
import types
import weakref

from kbert.backend.private_state import dynamo_config_patch, prime_weight_decay_choices


def torch_compiled_training_step(step, optimizer, variables):
    """`step` (Keras' PyTorch training step on one batch) under `torch.compile`, as one graph. PyTorch only.

    Keras passes its step to `torch.compile` as it is, and dynamo breaks the
    graph twice in it: at `loss.backward()` (traced only with dynamo's
    `trace_autograd_ops`, which is off by default), and at the `re.search`
    with which Keras' optimizers pick the variables excluded from weight
    decay (no Keras issue asks for a compilable exclusion that we could find;
    keras-team/keras#18569, which turned `torch.compile` on in Keras' PyTorch
    trainer, names graph breaks in the step as its known caveat). Here the
    step is traced with `trace_autograd_ops` on, and the optimizer's answer
    for each of `variables` is computed before the first trace (Keras caches
    it per variable), so that forward, backward and update form one graph.
    The optimizer's `warnings.warn` about variables with no gradient (an
    unused pooler) is moved after the graph (dynamo's
    `reorderable_logging_functions`) instead of breaking it.
    """
    import torch

    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    prime_weight_decay_choices(optimizer, variables)
    compiled = torch.compile(step)

    parameters = [variable.value for variable in variables]

    def compiled_step(data):
        with training_step_tracing():
            logs = compiled(data)
        # Keras' step starts with `zero_grad()`, which dynamo guards on: with the
        # gradients left in place, the second step would trace again.
        for parameter in parameters:
            parameter.grad = None
        return logs

    return compiled_step


def training_step_tracing():
    """The dynamo settings under which `torch_compiled_training_step` traces (a context manager)."""
    import warnings

    return dynamo_config_patch(trace_autograd_ops=True, reorderable_logging_functions={warnings.warn})


def torch_compiled_method(model, name):
    """`model.<name>` under `torch.compile`, compiled once per model and method.

    By default Dynamo guards every attribute of every layer of the model,
    which costs milliseconds per step, and Keras setting an attribute on the
    first call forces a second compilation. The guards on the model's modules
    are therefore dropped. That is safe only while one model uses the cache,
    and Dynamo keeps its cache on the code object, so the method is compiled
    from a copy with a code object of its own, kept per model (weakly): every
    generator of the model shares its compiled steps. A new batch size or
    prompt length recompiles once, with those sizes dynamic (Dynamo's
    automatic dynamic shapes); later sizes reuse that graph.
    """
    import torch

    compiled = _COMPILED_METHODS.setdefault(model, {})
    if name not in compiled:
        function = getattr(type(model), name)
        copy = types.FunctionType(
            function.__code__.replace(),
            function.__globals__,
            function.__name__,
            function.__defaults__,
            function.__closure__,
        )
        guards = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        compiled[name] = torch.compile(copy, options=guards)
    return functools.partial(compiled[name], model)


_COMPILED_METHODS = weakref.WeakKeyDictionary()  # model -> {method name: its compiled copy}

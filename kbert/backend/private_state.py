"""Every read of a private Keras or PyTorch attribute in kbert, each behind a named function.

Keras and PyTorch may rename or drop private attributes in any release; kbert
reads them only here, each for a reason its docstring gives, and
`tests/test_private_state.py` names any the installed versions lack.
"""


def tracks_attributes_as_torch_module(model):
    """Whether `model.__setattr__` should go through Keras' (and `torch.nn.Module`'s) attribute tracking.

    On PyTorch, `torch.nn.Module.__setattr__` refuses a layer before the
    module is initialised, so `Backbone` sets attributes with
    `object.__setattr__`, after Keras' own tracking (`keras_tracked`), until
    `_initialized` exists. Neither Keras 3.15 nor PyTorch sets
    `_initialized` (KerasHub's backbone sets its own), so on PyTorch this is
    always False today. Elsewhere (TensorFlow, JAX) always True.

    >>> isinstance(tracks_attributes_as_torch_module(keras.layers.Dense(1)), bool)
    True
    """
    import keras

    return keras.backend.backend() != "torch" or hasattr(model, "_initialized")


def keras_tracked(layer, name, value):
    """`(name, value)` after Keras' own tracking of `layer.<name> = value` (`Layer.__setattr__` without the
    backend's module: `layer._setattr_hook`, `layer._tracker`).

    `Backbone` sets its attributes with `object.__setattr__` on PyTorch before
    `torch.nn.Module` is initialised (which refuses a layer then); tracking
    them here as Keras does on TensorFlow and JAX keeps the variables, and so
    an optimizer's slots, in the same order on every backend.

    >>> layer = keras.layers.Layer()
    >>> keras_tracked(layer, "dense", keras.layers.Dense(1))[0]
    'dense'
    """
    name, value = layer._setattr_hook(name, value)
    if name != "_tracker":
        if not hasattr(layer, "_tracker"):
            layer._initialize_tracker()
        value = layer._tracker.track(value)
    return name, value


def compiled_loss(model):
    """The loss `model.compile(loss=…)` set (Keras' `CompileLoss`), or None: `model._compile_loss`.

    `Backbone.compute_loss` refuses to train a backbone that owns no loss
    with a clear message; Keras offers no public way to ask whether
    `compile` was given a loss (its `compiled_loss` property is deprecated).

    >>> compiled_loss(keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])) is None
    True
    """
    return model._compile_loss


def loss_tracker(model):
    """The `Mean` behind a compiled model's reported `loss`: `model._loss_tracker`.

    A custom `train_step` (PyTorch's DistributedDataParallel, in
    `kbert.distribute`) must update it as Keras' own step does.

    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    >>> model.compile(loss="mse")
    >>> loss_tracker(model).name
    'loss'
    """
    return model._loss_tracker


def call_takes_training(model):
    """Whether `model.call` has a `training` argument, as Keras' own steps read it: `model._call_has_training_arg`.

    A custom `train_step` (`kbert.distribute`) calls the model as Keras'
    step does: with `training=True` only where `call` takes it.

    >>> call_takes_training(keras.layers.Dropout(0.5))
    True
    """
    return model._call_has_training_arg


def compute_loss_of_step(model, **kwargs):
    """`model._compute_loss(**kwargs)`: Keras' training step's loss, which also calls a
    `compute_loss` overridden the old way (without `training`).

    A custom `train_step` (`kbert.distribute`) must get the loss exactly as Keras' step does.

    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    >>> model.compile(loss="mse")
    >>> zeros = np.zeros((2, 1), "float32")
    >>> float(compute_loss_of_step(model, x=zeros, y=zeros, y_pred=zeros, sample_weight=None, training=True))
    0.0
    """
    return model._compute_loss(**kwargs)


def keras_history_operation(tensor):
    """The operation (an `InputLayer`, a layer) that made a symbolic `KerasTensor`: `tensor._keras_history.operation`.

    `BackboneInternals` tells a backbone's required inputs from its optional
    ones (an `InputLayer`'s `optional`); Keras keeps a functional model's
    input layers only in this history.

    >>> keras_history_operation(keras.Input((2,), optional=True)).optional
    True
    """
    return tensor._keras_history.operation


def clear_variable_layout(variable):
    """Forget a JAX variable's sharding layout (`variable._layout = None`), so that an assigned value stays as it is.

    Keras' JAX variable re-shards every assigned value by its layout; to
    gather a model onto each process after a distributed run, kbert drops
    it (Keras has no public way to unshard a variable).

    >>> clear_variable_layout(keras.Variable(1.0))
    """
    variable._layout = None


def optimizer_slots(optimizer, variables, names=("_momentums", "_velocities")):
    """`[slot list for each of names]`, each the optimizer's slot variables of `variables` in order.

    Keras' Adam keeps its first and second moments in `_momentums` and
    `_velocities` (indexed by `_get_variable_index`), with no public
    accessor; kbert's `AdamW` passes them to PyTorch's fused Adam kernel.

    >>> variable = keras.Variable(np.zeros(3, "float32"))
    >>> optimizer = keras.optimizers.Adam()
    >>> optimizer.build([variable])
    >>> [[tuple(slot.shape) for slot in slots] for slots in optimizer_slots(optimizer, [variable])]
    [[(3,)], [(3,)]]
    """
    indices = [optimizer._get_variable_index(variable) for variable in variables]
    return [[getattr(optimizer, name)[i] for i in indices] for name in names]


def prime_weight_decay_choices(optimizer, variables):
    """Ask the optimizer, once per variable, whether it decays it (`optimizer._use_weight_decay`), which Keras caches.

    Keras picks the variables excluded from weight decay with a `re.search`
    at each step, where dynamo breaks a compiled training step's graph; asked
    before the first trace, the answers are cached and the step stays one
    graph (`kbert.backend.torch_compilation`; keras-team/keras#18569 names
    graph breaks in the step as the known caveat). No-op for an optimizer
    without it.

    >>> prime_weight_decay_choices(keras.optimizers.AdamW(), [keras.Variable(np.zeros(2, "float32"))])
    """
    if hasattr(optimizer, "_use_weight_decay"):
        for variable in variables:
            optimizer._use_weight_decay(variable)


def stored_kernel(layer):
    """A `Dense` layer's kernel variable as stored, without LoRA or quantization: `layer._kernel`.

    Keras' `Dense.kernel` property resolves the quantization modes first (3 µs
    a call on eager PyTorch, a fifth of a decoding step's projection);
    `FusedDense` reads the stored kernel where neither LoRA nor quantization applies.

    >>> layer = keras.layers.Dense(3)
    >>> layer.build((None, 2))
    >>> tuple(stored_kernel(layer).shape)
    (2, 3)
    """
    return layer._kernel


def rematerialized(layer):
    """Whether `layer` has a rematerialization mode (`layer._remat_mode`, set by `keras.RematScope`).

    A layer called directly (`DirectCall`) would skip the rematerialization
    that Keras' `Layer.__call__` applies; such a layer goes through Keras.

    >>> rematerialized(keras.layers.Dense(1))
    False
    """
    return getattr(layer, "_remat_mode", None) is not None


def tensor_storage_owner(tensor):
    """The PyTorch tensor that owns `tensor`'s memory: `tensor._base`, or `tensor` itself.

    Memoized masks (`kbert.backend.torch_ops.memoized`) are kept as long as
    the owner of the mask's memory lives; PyTorch has no public name for a
    view's base.

    >>> import torch
    >>> tensor = torch.zeros(4)
    >>> tensor_storage_owner(tensor[1:]) is tensor
    True
    """
    return tensor if tensor._base is None else tensor._base


def tensor_version(tensor):
    """PyTorch's counter of in-place changes to `tensor`: `tensor._version`.

    A memoized result or a cached weight layout (`kbert.backend.torch_ops`) is
    valid only while its tensor is unchanged; PyTorch bumps this counter at
    every in-place write, and offers no public equivalent.

    >>> import torch
    >>> tensor = torch.zeros(2)
    >>> before = tensor_version(tensor)
    >>> _ = tensor.add_(1)
    >>> tensor_version(tensor) - before
    1
    """
    return tensor._version


def fused_adam_kernel():
    """PyTorch's fused Adam kernel, `torch._fused_adam_`, the one `torch.optim.Adam(fused=True)` calls.

    `kbert.backend.torch_ops.fused_adam` calls it with Keras' slots
    directly: going through `torch.optim.Adam` would need its own copies of
    the optimizer state.

    >>> callable(fused_adam_kernel())
    True
    """
    import torch

    return torch._fused_adam_


def dynamo_config_patch(**settings):
    """`torch._dynamo.config.patch(**settings)`: dynamo's settings for a block (a context manager).

    `kbert.backend.torch_compilation` traces a training step with
    `trace_autograd_ops` (so `loss.backward()` is in the graph) and
    `reorderable_logging_functions`, which have no public switch.

    >>> with dynamo_config_patch(trace_autograd_ops=True):
    ...     pass
    """
    import torch

    return torch._dynamo.config.patch(**settings)



"""The engines' settings: TensorFlow's strategies, Keras' JAX distributions, the Megatron layout.

The engines are TensorFlow's `tf.distribute` and Keras' `keras.distribution`
(JAX); this module only picks and configures them (`DistributedTraining`
uses them for the jobs; PyTorch's `torch.distributed` is in
`kbert.distribute.torch_data_parallel`):

- `default_strategy()` (TensorFlow): `TPUStrategy` when a TPU is found,
  `MirroredStrategy` over several GPUs, else the default strategy. Build and
  compile the model under `strategy.scope()`, then `fit` as usual.
- `get_distribution()` (JAX): `keras.distribution.DataParallel` over several
  devices, or `ModelParallel` with `layout_map` when `model_parallel > 1`.
  Set it with `keras.distribution.set_distribution` (or `with
  distribution.scope():`) before the model is built. Several hosts call
  `keras.distribution.initialize()` first; the devices are then global.
- `layout_map(model_or_name, device_mesh)`: Megatron-style sharding of
  kbert's encoders and T5 over a `"model"` mesh axis. The query, key and
  value kernels and the first feed-forward kernel (and gate) are split by
  output columns, the attention-output and second feed-forward kernels by
  input rows, so each block needs one all-reduce per sublayer; the token
  table (and T5's `lm_head`) are split along the hidden width. Every other
  variable (LayerNorms, position tables, heads) is replicated.

Keras 3 XLA-compiles the whole multi-replica step when `jit_compile=True`,
which works under `TPUStrategy` (and on one device) but not under a
`MirroredStrategy` over several devices (XLA cannot reach a variable on
another device: keras-team/keras#19005). `jit_compile_for(strategy)` gives
the setting that works.

PyTorch has neither engine in Keras 3: both helpers raise there (see
`kbert.distribute.torch_data_parallel`).
"""

import os
import re

import keras

from kbert.backend.imports import quiet_import

MODEL_AXIS = "model"
BATCH_AXIS = "batch"

# (variable path pattern, layout), matched with `re.fullmatch` against
# `variable.path` by `keras.distribution.LayoutMap`; a layout names
# `MODEL_AXIS` where the variable is split (`layout_map` puts the mesh's model
# axis there). A sublayer's Keras name is its attribute name (see
# docs/architecture.md): an attention layer (`attention_layer` in an
# `EncoderBlock`, `self_attention` and `cross_attention` in T5's and BART's
# blocks) holds `query_dense`, `key_dense`, `value_dense` (Longformer adds
# `*_global_dense`) and `output_dense`; a block (`..._layer` or `..._layer_<i>`)
# holds its feed-forward layers `intermediate_dense` (and `gate_dense`) and
# `output_dense`.
_COLUMNS, _ROWS, _VECTOR = (None, MODEL_AXIS), (MODEL_AXIS, None), (MODEL_AXIS,)
_ATTENTION = r"attention(_layer)?"
_PROJECTION = rf"{_ATTENTION}/(query|key|value)(_global)?_dense"
SHARDING_RULES = (
    (rf".*{_PROJECTION}/kernel", _COLUMNS),
    (rf".*{_PROJECTION}/bias", _VECTOR),
    (rf".*{_ATTENTION}/output_dense/kernel", _ROWS),
    (r".*(intermediate|gate)_dense/kernel", _COLUMNS),
    (r".*intermediate_dense/bias", _VECTOR),
    (r".*(?<!attention_)layer(_\d+)?/output_dense/kernel", _ROWS),
    (r".*token_embedding/embeddings", _COLUMNS),
    (r".*lm_head/kernel", _ROWS),
)


def _require_backend(name, what):
    backend = keras.backend.backend()
    if backend != name:
        hint = {
            "tensorflow": "use `default_strategy()` with a TensorFlow backend",
            "jax": "use `get_distribution()` with the JAX backend",
            "torch": "PyTorch runs data-parallel under torchrun (kbert.distribute.DistributedTraining)",
        }[backend]
        raise ValueError(f"{what} needs KERAS_BACKEND={name}; this is {backend}: {hint}.")


def default_strategy(tpu=None):
    """The `tf.distribute.Strategy` for this machine (TensorFlow backend).

    A TPU (`tpu` names it: `"local"` on a Cloud TPU VM, a TPU name or
    `grpc://` address; else `$TPU_NAME`, else `"local"` when TensorFlow sees
    TPU devices) gives a connected, initialized `TPUStrategy`; several GPUs
    give a `MirroredStrategy`; otherwise the default (one-device) strategy.

    Raises:
        ValueError: under another Keras backend.

    Example:
    >>> strategy = default_strategy()  # doctest: +SKIP
    >>> with strategy.scope():  # doctest: +SKIP
    ...     model = kbert.pretraining.BertPretrainer(kbert.models.bert_base())
    ...     model.compile(optimizer="adam", jit_compile=jit_compile_for(strategy))
    """
    _require_backend("tensorflow", "default_strategy()")
    tf = quiet_import("tensorflow")
    if tpu is None:
        tpu = os.environ.get("TPU_NAME")
    if tpu is None and tf.config.list_physical_devices("TPU"):
        tpu = "local"
    if tpu is not None:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def jit_compile_for(strategy):
    """The `jit_compile` setting for `model.compile` under a `tf.distribute` strategy.

    True (XLA) on TPUs and on one device; False for a multi-device strategy
    other than `TPUStrategy`, where Keras 3 cannot XLA-compile the step (see
    the module docstring).

    >>> jit_compile_for(None)
    True
    """
    if strategy is None or strategy.num_replicas_in_sync == 1:
        return True
    tf = quiet_import("tensorflow")
    return isinstance(strategy, tf.distribute.TPUStrategy)


def device_mesh(model_parallel=1, devices=None):
    """A 2-D `keras.distribution.DeviceMesh` `(batch, model)` over `devices`.

    Args:
        model_parallel: size of the `"model"` axis; must divide the device count.
        devices: device names; default `keras.distribution.list_devices()`.

    Example:
    >>> mesh = device_mesh(1, devices=["cpu:0"])
    >>> mesh.shape, mesh.axis_names
    ((1, 1), ['batch', 'model'])
    """
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    if model_parallel < 1 or len(devices) % model_parallel:
        raise ValueError(
            f"model_parallel={model_parallel} must be a positive divisor of the "
            f"{len(devices)} devices ({', '.join(devices)})."
        )
    return keras.distribution.DeviceMesh(
        shape=(len(devices) // model_parallel, model_parallel),
        axis_names=[BATCH_AXIS, MODEL_AXIS],
        devices=devices,
    )


def _preset_sharded_dims(name):
    """The widths that `SHARDING_RULES` split, for a named preset."""
    from kbert.models.presets import PRESETS, T5_PRESETS

    if name in PRESETS:
        config = PRESETS[name]
        widths = (config["hidden_dim"], config["intermediate_dim"], config.get("embedding_dim"))
        return config["num_heads"], widths
    if name in T5_PRESETS:
        config = T5_PRESETS[name]
        inner = config["num_heads"] * config.get("key_dim", config["hidden_dim"] // config["num_heads"])
        return config["num_heads"], (config["hidden_dim"], config["intermediate_dim"], inner)
    known = sorted(PRESETS) + sorted(T5_PRESETS)
    raise ValueError(f"Unknown model '{name}'; known: {', '.join(known)}.")


def _sharded_variables(model):
    """`(path, shape, sharded axis)` of each of `model`'s variables that a rule shards."""
    sharded = []
    for variable in model.weights:
        for pattern, axes in SHARDING_RULES:
            if re.fullmatch(pattern, variable.path):
                sharded.append((variable.path, tuple(variable.shape), axes.index(MODEL_AXIS)))
                break
    return sharded


def layout_map(model_or_name, device_mesh, model_axis=MODEL_AXIS):
    """A `keras.distribution.LayoutMap` sharding a kbert encoder or T5 over `model_axis`.

    See the module docstring for which variables are split and how. Pass the
    result to `keras.distribution.ModelParallel(layout_map=...)` and build the
    model under that distribution.

    Args:
        model_or_name: a preset name (`"bert_base"`, `"t5_small"`, ...) or a
            built kbert model (a backbone, or a pretrainer or task model that
            wraps one); its sharded widths are checked against the axis size.
        device_mesh: a `keras.distribution.DeviceMesh` with `model_axis`.
        model_axis: the mesh axis to shard over.

    Raises:
        ValueError: unknown preset, a mesh without `model_axis`, a model
            with no variable to shard, or a sharded width (or the head count)
            not divisible by the axis size.

    Example:
    >>> mesh = device_mesh(1, devices=["cpu:0"])
    >>> layout = layout_map("bert_base", mesh)
    >>> layout["transformer_layer_0/attention_layer/query_dense/kernel"].axes
    (None, 'model')
    """
    if model_axis not in device_mesh.axis_names:
        raise ValueError(
            f"The device mesh has axes {list(device_mesh.axis_names)}, not {model_axis!r}."
        )
    size = device_mesh.shape[list(device_mesh.axis_names).index(model_axis)]
    if isinstance(model_or_name, str):
        num_heads, widths = _preset_sharded_dims(model_or_name)
        bad = [f"{w}" for w in widths if w is not None and w % size]
        if num_heads % size:
            bad.append(f"{num_heads} heads")
    else:
        sharded = _sharded_variables(model_or_name)
        if not sharded:
            raise ValueError(
                f"No variable of {model_or_name.name!r} matches kbert's sharding rules; "
                "is it a kbert encoder or T5?"
            )
        bad = [f"{path} {shape}" for path, shape, axis in sharded if shape[axis] % size]
    if bad:
        raise ValueError(
            f"Cannot shard {getattr(model_or_name, 'name', model_or_name)!r} over a "
            f"{model_axis!r} axis of size {size}: not divisible: {', '.join(bad)}."
        )
    layout = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in SHARDING_RULES:
        layout[pattern] = tuple(model_axis if axis == MODEL_AXIS else axis for axis in axes)
    return layout


def get_distribution(model_parallel=1, model=None, devices=None, auto_shard_dataset=True):
    """The `keras.distribution.Distribution` for this machine (JAX backend), or None.

    With `model_parallel > 1`, a `ModelParallel` over a `(batch, model)` mesh
    (`device_mesh`) with `layout_map(model, mesh)`; otherwise a
    `DataParallel` when there are several devices, and None (train on the one
    device) when there is one.

    Args:
        model_parallel: size of the `"model"` mesh axis.
        model: preset name or built model for `layout_map` (needed when
            `model_parallel > 1`).
        devices: device names; default `keras.distribution.list_devices()`
            (accelerators if any, else CPU; global devices on several hosts).
        auto_shard_dataset: on several processes, let Keras shard a
            `tf.data` input; False when each process gives its own rows.

    Raises:
        ValueError: under another backend, `model_parallel > 1` without
            `model`, or a bad mesh or layout (see `device_mesh`, `layout_map`).

    Example:
    >>> distribution = get_distribution()  # doctest: +SKIP
    >>> if distribution is not None:  # doctest: +SKIP
    ...     keras.distribution.set_distribution(distribution)
    >>> backbone = kbert.models.bert_base()  # doctest: +SKIP
    """
    _require_backend("jax", "get_distribution()")
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    if model_parallel > 1:
        if model is None:
            raise ValueError("model_parallel > 1 needs `model`, a preset name or a built model.")
        mesh = device_mesh(model_parallel, devices)
        return keras.distribution.ModelParallel(
            layout_map=layout_map(model, mesh), batch_dim_name=BATCH_AXIS,
            auto_shard_dataset=auto_shard_dataset,
        )
    if len(devices) > 1:
        return keras.distribution.DataParallel(devices=devices, auto_shard_dataset=auto_shard_dataset)
    return None

"""The helpers every checkpoint converter shares: read the tensors, name them, assign them.

- `read_config(directory)`: its parsed `config.json`.
- `read_tensors(directory)`: a Hugging Face directory's tensors by name, from
  `model.safetensors`, sharded safetensors (`model.safetensors.index.json`) or
  `pytorch_model.bin` (optionally sharded likewise). Safetensors files are
  read with NumPy; PyTorch is needed only for `.bin` files.
- `strip_prefix(tensors, prefix)`: the backbone's tensors of a task
  checkpoint (`bert.encoder...` -> `encoder...`); head tensors keep their names.
- `resolve_sublayer(owner, path, entry)`: the layer at a converter's attribute
  path, or an error naming the converter entry that no longer resolves.
- `layer_tensor_names(layer, module)`: `{variable path: (tensor name,
  transpose)}` of one `Dense`, `LayerNormalization`, `RMSNormalization`,
  embedding layer or tied vocabulary head (its bias). Hugging Face `Linear` weights are `[out, in]` and are
  transposed to Keras `[in, out]` kernels.
- `assign_tensors(model, names, tensors, ...)`: fills every variable of the
  model, accepting old LayerNorm names (`gamma`/`beta`); a variable without a
  name, a tensor that is missing or whose shape differs raises, naming it.
- `stored_tensors(model, names)`: the other way, for export: each variable's
  array under its tensor name, `Linear` weights transposed back.
- `unread_tensors(tensors, read)`: the tensors a model left unread, buffers aside.
- `kbert_activation(name)`: the kbert name of a Hugging Face activation.
- `check_fixed_options(config, options, family)`: refuses options kbert does not represent.

A file that cannot be parsed (a truncated `config.json` or weight file) raises
a `ValueError` that names the file.
"""

import json
import os
import pickle

import keras
import numpy as np

from kbert.layers.activations import activation_name

# Hugging Face activation names that mean the same function in kbert (their
# kbert names come from `kbert.layers.activations`). Others, such as
# `quick_gelu` or `leaky_relu` (another slope than Keras'), are refused.
SUPPORTED_ACTIVATIONS = (
    "gelu",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_pytorch_tanh",
    "relu",
    "silu",
    "swish",
    "tanh",
)

# Leaves of checkpoint tensors that are buffers, not weights: nothing reads them.
_BUFFER_LEAVES = ("position_ids", "token_type_ids")

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def kbert_activation(name, option="hidden activation"):
    """The kbert activation for the Hugging Face activation `name` of config `option`.

    >>> kbert_activation("gelu_new")
    'gelu_approximate'
    """
    if name not in SUPPORTED_ACTIVATIONS:
        raise ValueError(
            f"Unsupported {option} {name!r} in config.json; "
            f"supported: {sorted(SUPPORTED_ACTIVATIONS)}."
        )
    return activation_name(name)


def check_fixed_options(config, options, family):
    """A `ValueError` for a config option that differs from the value kbert's `family` model needs.

    >>> check_fixed_options({"bi_data": False}, {"bi_data": False}, "XLNet")
    """
    for option, value in options.items():
        if config.get(option, value) != value:
            raise ValueError(f"Unsupported {family} option {option}={config[option]!r} in config.json.")


def read_config(directory):
    """The parsed `config.json` of the checkpoint directory `directory`.

    Raises:
        FileNotFoundError: `directory` is not a directory, or has no `config.json`.
    """
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Hugging Face checkpoint directory not found: {directory}")
    config_file = os.path.join(directory, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"No config.json in {directory}.")
    config = _read_json(config_file)
    if not isinstance(config, dict):
        raise ValueError(f"{config_file} holds no JSON object: {type(config).__name__}.")
    return config


def _unreadable(file, error):
    return ValueError(
        f"Cannot read {file}: it is truncated or corrupt ({type(error).__name__}: {error})."
    )


def _read_json(file):
    try:
        with open(file) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _unreadable(file, error) from error


def _read_safetensors(file):
    import ml_dtypes  # noqa: F401  (a Keras dependency; lets NumPy read bfloat16)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(file)
    except SafetensorError as error:
        raise _unreadable(file, error) from error


def _read_torch(file):
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"Reading {file} needs PyTorch (`pip install torch`); or convert the "
            "checkpoint to model.safetensors, which kbert reads without it."
        ) from None
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError, OSError) as error:
        raise _unreadable(file, error) from error
    return {
        name: (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy()
        for name, t in state.items()
    }


def read_tensors(directory):
    """All tensors of the checkpoint in `directory`, as NumPy arrays by name."""
    for filename in _WEIGHT_FILES:
        file = os.path.join(directory, filename)
        if not os.path.isfile(file):
            continue
        read = _read_safetensors if filename.startswith("model.") else _read_torch
        if not filename.endswith(".index.json"):
            return read(file)
        shards = sorted(set(_read_json(file)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(read(os.path.join(directory, shard)))
        return tensors
    raise FileNotFoundError(
        f"No weights found in {directory}: expected one of {', '.join(_WEIGHT_FILES)}."
    )


def strip_prefix(tensors, prefix):
    """`tensors` with `prefix` removed from the names that start with it.

    >>> sorted(strip_prefix({"bert.pooler.dense.weight": 1, "classifier.weight": 2}, "bert."))
    ['classifier.weight', 'pooler.dense.weight']
    """
    if not prefix:
        return dict(tensors)
    return {
        name[len(prefix) :] if name.startswith(prefix) else name: array
        for name, array in tensors.items()
    }


def resolve_sublayer(owner, path, entry):
    """The layer at the dotted attribute `path` of `owner`.

    Raises:
        AttributeError: naming `entry` (the converter entry that reads `path`)
            and the attribute that is missing.
    """
    layer = owner
    for name in path.split("."):
        if not hasattr(layer, name):
            raise AttributeError(
                f"Converter entry {entry}: {type(layer).__name__} {getattr(layer, 'name', '')!r} "
                f"has no attribute {name!r} (path {path!r} from {type(owner).__name__}); "
                "a sublayer's attribute name is its Keras name (docs/architecture.md)."
            )
        layer = getattr(layer, name)
    return layer


def layer_tensor_names(layer, module):
    """`{variable path: (tensor name, transpose)}` for `layer`, read from HF `module`.

    >>> import keras
    >>> dense = keras.layers.Dense(3, name="query")
    >>> dense.build((None, 2))
    >>> layer_tensor_names(dense, "attention.self.query")
    {'query/kernel': ('attention.self.query.weight', True), 'query/bias': ('attention.self.query.bias', False)}
    """
    if hasattr(layer, "kernel"):  # Dense: the HF Linear weight is [out, in]
        pairs = [(layer.kernel, "weight", True), (layer.bias, "bias", False)]
    elif hasattr(layer, "gamma"):  # LayerNormalization
        pairs = [(layer.gamma, "weight", False), (layer.beta, "bias", False)]
    elif hasattr(layer, "scale"):  # RMSNormalization
        pairs = [(layer.scale, "weight", False)]
    elif getattr(layer, "token_embedding", None) is not None:  # a tied vocabulary head: its bias
        pairs = [(layer.bias, "bias", False)]
    else:  # Embedding, PositionEmbedding, RelativePositionBias
        pairs = [(layer.embeddings, "weight", False)]
    return {
        variable.path: (f"{module}.{leaf}", transpose)
        for variable, leaf, transpose in pairs
        if variable is not None
    }


def stored_name(tensors, name):
    """The key of `name` in `tensors`, old LayerNorm `gamma`/`beta` accepted; None if absent.

    >>> stored_name({"encoder.LayerNorm.gamma": 1.0}, "encoder.LayerNorm.weight")
    'encoder.LayerNorm.gamma'
    """
    if name in tensors:
        return name
    old = {"weight": "gamma", "bias": "beta"}
    stem, _, leaf = name.rpartition(".")
    if ("LayerNorm" in stem or "layer_norm" in stem) and leaf in old:
        return f"{stem}.{old[leaf]}" if f"{stem}.{old[leaf]}" in tensors else None
    return None


def lookup_tensor(tensors, name):
    """The tensor for `name`, accepting old LayerNorm `gamma`/`beta` names; None if absent.

    >>> lookup_tensor({"encoder.LayerNorm.gamma": 1.0}, "encoder.LayerNorm.weight")
    1.0
    """
    stored = stored_name(tensors, name)
    return None if stored is None else tensors[stored]


def unread_tensors(tensors, read):
    """The names of `tensors` that are not in `read` and are no buffer (`position_ids` …), sorted.

    >>> unread_tensors({"a.weight": 1, "embeddings.position_ids": 2, "b.bias": 3}, {"a.weight"})
    ['b.bias']
    """
    buffers = {name for name in tensors if name.rpartition(".")[2] in _BUFFER_LEAVES}
    return sorted(set(tensors) - set(read) - buffers)


def _arrays(model, names, tensors, where):
    """`(variable, array)` pairs, and the missing tensors' descriptions."""
    uncovered = [v.path for v in model.weights if v.path not in names]
    if uncovered:
        raise RuntimeError(f"kbert variables without a Hugging Face name: {uncovered}.")
    arrays, missing = [], []
    for variable in model.weights:
        name, transpose = names[variable.path]
        array = lookup_tensor(tensors, name)
        expected = tuple(variable.shape)
        if array is None:
            missing.append(f"{name} (shape {expected[::-1] if transpose else expected})")
            continue
        array = np.asarray(array.T if transpose else array)
        if tuple(array.shape) != expected:
            hf_shape = tuple(array.shape[::-1] if transpose else array.shape)
            raise ValueError(
                f"Shape mismatch for Hugging Face tensor {name!r}{where} of shape {hf_shape}"
                + (f" (transposed to {tuple(array.shape)})" if transpose else "")
                + f": the kbert variable {variable.path!r} has shape {expected}."
            )
        arrays.append((variable, array))
    return arrays, missing


def stored_tensors(model, names):
    """`{tensor name: float32 array}` of the variables of `model` that `names` names, transposed where marked.

    The inverse of `assign_tensors` (export): `names` is what a converter's
    `weight_names` gives; variables it does not name are left out.

    >>> import keras
    >>> dense = keras.layers.Dense(3, name="query")
    >>> dense.build((None, 2))
    >>> {k: v.shape for k, v in stored_tensors(dense, layer_tensor_names(dense, "q")).items()}
    {'q.weight': (3, 2), 'q.bias': (3,)}
    """
    tensors = {}
    for variable in model.weights:
        if variable.path in names:
            name, transpose = names[variable.path]
            array = np.asarray(keras.ops.convert_to_numpy(variable.value), dtype=np.float32)
            tensors[name] = np.ascontiguousarray(array.T if transpose else array)
    return tensors


def _listed(names, limit=5):
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def assign_tensors(model, names, tensors, source=None, hint="", must_read=()):
    """Fill every variable of `model` from `tensors`, by `names` (see `layer_tensor_names`).

    Args:
        model: the built kbert model.
        names: `{variable path: (tensor name, transpose)}` covering every variable.
        tensors: the checkpoint's arrays by name.
        source: where the tensors come from (a directory), for the error message.
        hint: added to the missing-tensor error (e.g. why a tensor may be absent).
        must_read: names of `tensors` that some variable must read (the
            backbone's, say): one left unread, buffers aside, means the config
            declares less than the checkpoint holds.

    Raises:
        RuntimeError: a variable of `model` has no name (a converter bug).
        ValueError: a tensor is missing, left unread, or its shape differs
            from the variable's; the message names the tensors and `source`.
    """
    where = f" in {source}" if source else ""
    arrays, missing = _arrays(model, names, tensors, where)
    if missing:
        raise ValueError(
            f"The checkpoint{where} lacks {len(missing)} tensor(s) the model needs{hint}: "
            f"{_listed(missing)}. It holds e.g. {sorted(tensors)[:5]}."
        )
    unread = unread_tensors(must_read, {stored_name(tensors, name) for name, _ in names.values()})
    if unread:
        raise ValueError(
            f"The checkpoint{where} holds {len(unread)} tensor(s) that no variable of the "
            f"{type(model).__name__} reads: {_listed(unread)}. Its config.json declares fewer "
            "layers or parts than its weights hold."
        )
    for variable, array in arrays:
        if array.dtype != np.float32:
            array = array.astype(np.float32)
        variable.assign(array)

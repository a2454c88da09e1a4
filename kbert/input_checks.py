"""Checks of a model's inputs: id dtypes and ranges, 0/1 masks, shapes that must agree.

Each kbert model declares its inputs in a small table, `INPUT_TABLE` (what it
is called on) and `TARGET_TABLE` (its `y` in `fit`), built from `ids`,
`mask`, `positions`, `labels` and `weights`. A rule names the axes of its
input (`("batch", "sequence")`), so inputs that share an axis name must
agree on its size; an axis named after an integer attribute of the model
(`"num_choices"`) must have that size; an axis whose name holds "sequence"
must not be empty.

Where the checks run, so that none costs a host sync per compiled step:

- an eager call (`model(x)`) checks shapes and values concretely;
- a traced call (`predict`, `fit`, `evaluate`, XLA) checks the static shapes;
- `InputChecks`, the mixin of `Backbone` and `Task`, checks the data where it
  enters `fit`, `evaluate`, `predict` and the `*_on_batch` methods: arrays
  and tensors once, up front; a `tf.data.Dataset` through a `map` of
  `tf.debugging` assertions, which run in the input pipeline on the host.

A bad input raises a `ValueError` naming the input, the bad value, its
position and the allowed range.
"""

import contextlib
import re
import sys
import threading
from typing import NamedTuple

import numpy as np

from kbert.backend.ops import is_eager_tensor, loops_detach_variables

from kbert.backend.imports import traced_as_written

TOKENS = ("batch", "sequence")
PREDICTIONS = ("batch", "predictions")

# Starts the message of an assertion made in a tf.data pipeline, so that the
# backend's error can be told apart and raised again as a `ValueError`.
_MARKER = "kbert input check: "


class _Rule(NamedTuple):
    kind: str  # "ids", "mask", "positions", "labels" or "weights"
    bound: object  # ids, labels: exclusive upper bound (int or attribute path); positions: an axis
    dims: tuple  # axis names
    allow_negative: bool = False  # negative values mark entries left out


def ids(bound, dims=TOKENS):
    """Integer ids in `[0, bound)`; `bound` an int or an attribute path ("vocabulary_size")."""
    return _Rule("ids", bound, dims)


def mask(dims=TOKENS):
    """A 0/1 mask."""
    return _Rule("mask", None, dims)


def positions(dims=PREDICTIONS, axis="sequence", allow_negative=False):
    """Integer positions into the axis `axis` of the other inputs."""
    return _Rule("positions", axis, dims, allow_negative)


def labels(bound, dims=("batch",)):
    """Class ids below `bound`; negative ones are left out, float ones (regression) not checked."""
    return _Rule("labels", bound, dims, allow_negative=True)


def weights(dims=PREDICTIONS):
    """Float weights: only their shape is checked."""
    return _Rule("weights", None, dims)


_upstream = threading.local()


@contextlib.contextmanager
def checked_upstream():
    """Within it, calls skip the value checks: `fit` and its kin (or a generator) checked the
    data at entry."""
    previous = getattr(_upstream, "active", False)
    _upstream.active = True
    try:
        yield
    finally:
        _upstream.active = previous


def _attribute(owner, path):
    if not isinstance(path, str):
        return path
    for name in path.split("."):
        owner = getattr(owner, name)
    return owner


def input_rules(model, table_name="INPUT_TABLE"):
    """`{input name: (rule, bound)}` for `model`'s table, with bounds read off the model.

    A task also takes its backbone's inputs (`CHECKED_BACKBONE`, with
    `BACKBONE_EXTRA_DIMS` inserted after the batch axis).

    >>> import kbert
    >>> rules = input_rules(kbert.models.bert_tiny(num_layers=1, vocabulary_size=30))
    >>> rules["token_ids"][1], rules["padding_mask"][0].kind
    (30, 'mask')
    """
    rules = {}
    backbone = getattr(model, getattr(model, "CHECKED_BACKBONE", ""), None)
    if table_name == "INPUT_TABLE" and backbone is not None:
        extra = tuple(getattr(model, "BACKBONE_EXTRA_DIMS", ()))
        for name, (rule, bound) in input_rules(backbone).items():
            rules[name] = (rule._replace(dims=rule.dims[:1] + extra + rule.dims[1:]), bound)
    table = getattr(model, table_name, {})
    if backbone is None and table_name == "INPUT_TABLE":  # a backbone: the inputs it takes
        table = {name: rule for name, rule in table.items() if name in model.input}
    for name, rule in table.items():
        bound = _attribute(model, rule.bound) if rule.kind in ("ids", "labels") else rule.bound
        rules[name] = (rule, bound)
    return rules


def _named_values(model, x, y):
    """The checked entries of `x` and `y` by name (a lone `y` takes the target table's one name)."""
    values = {}
    if isinstance(x, dict):
        values.update({name: value for name, value in x.items() if value is not None})
    targets = getattr(model, "TARGET_TABLE", {})
    if isinstance(y, dict):
        values.update({name: value for name, value in y.items() if name in targets})
    elif y is not None and len(targets) == 1:
        values[next(iter(targets))] = y
    return values


def _rules_for(model, values):
    rules = {**input_rules(model), **input_rules(model, "TARGET_TABLE")}
    return {name: rules[name] for name in values if name in rules}


def _where(owner, name):
    return f"{owner} input '{name}'"


def _axis_sizes(model, values, rules):
    """`{axis: (size, input name)}` from the static shapes; a `ValueError` where they disagree."""
    owner = type(model).__name__
    sizes = {}
    for name, (rule, _) in rules.items():
        shape = tuple(None if size is None else int(size) for size in values[name].shape)
        expected = [_expected_size(model, dim) for dim in rule.dims]
        if len(shape) != len(rule.dims) or any(
            size is not None and size != wanted for size, wanted in zip(shape, expected) if wanted
        ):
            axes = ", ".join(
                dim + (f"={wanted}" if wanted else "") for dim, wanted in zip(rule.dims, expected)
            )
            raise ValueError(
                f"{_where(owner, name)} must have shape ({axes}); received shape {shape}."
            )
        for dim, size in zip(rule.dims, shape):
            _check_axis(owner, name, dim, size, sizes)
            if size is not None:
                sizes.setdefault(dim, (size, name))
    return sizes


def _expected_size(model, dim):
    """The size an axis named after an integer attribute of `model` must have, else None."""
    size = getattr(model, dim, None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _check_axis(owner, name, dim, size, sizes):
    if size is None:
        return
    if "sequence" in dim and size == 0:
        raise ValueError(f"{_where(owner, name)} has an empty {dim} axis (length 0).")
    if dim in sizes and sizes[dim][0] != size:
        other_size, other = sizes[dim]
        raise ValueError(
            f"{_where(owner, name)} has {dim} length {size}, but '{other}' has "
            f"{other_size}: they must agree."
        )


def _allowed(rule, bound, sizes):
    """`(low, high, description)` of the values `rule` allows, or None when not checked."""
    if rule.kind == "mask":
        return 0, 2, "0 or 1"
    if rule.kind == "weights":
        return None
    low = -np.inf if rule.allow_negative else 0
    start = 0 if low == 0 else "-inf"
    if rule.kind == "positions":
        if rule.bound not in sizes:
            return None
        size = sizes[rule.bound][0]
        if isinstance(size, int):
            return low, size, f"[{start}, {size}) (the {rule.bound} length)"
        return low, size, f"[{start}, the {rule.bound} length)"
    if isinstance(rule.bound, str):
        return low, bound, f"[{start}, {bound}) ({rule.bound})"
    return low, bound, f"[{start}, {bound})"


def _range_checked(owner, name, rule, dtype):
    """Whether values of `dtype` get the range check; a `ValueError` for ids that are not integers.

    Float labels are regression targets, not checked.
    """
    import keras

    dtype = keras.backend.standardize_dtype(dtype)
    integer = "int" in dtype or dtype == "bool"
    if rule.kind == "labels" and not integer:
        return False
    if rule.kind in ("ids", "positions", "labels") and not integer:
        raise ValueError(f"{_where(owner, name)} must hold integers; received dtype {dtype}.")
    return True


def _check_values(owner, name, rule, allowed, array):
    """A `ValueError` when the NumPy `array` has a wrong dtype or a value outside `allowed`."""
    if not _range_checked(owner, name, rule, array.dtype):
        return
    low, high, description = allowed
    if rule.kind == "mask":
        bad = (array != 0) & (array != 1)
    else:
        bad = (array < low) | (array >= high)
    if bad.any():
        position = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{_where(owner, name)} holds {array[position]} at position {position}, "
            f"outside the allowed {description}."
        )


def _is_concrete(value):
    return isinstance(value, (np.ndarray, list, tuple, int, float)) or is_eager_tensor(value)


def check_ids_in_range(ids, size, what):
    """Raise `ValueError` when an eager tensor of ids leaves `[0, size)`.

    A no-op on traced tensors, where the values are unknown, and inside `fit`
    and its kin, which checked the data where it entered: an eager step (all
    of PyTorch's) then reads no ids back to the host.

    >>> check_ids_in_range(np.array([[0, 5]]), 6, "token id")
    """
    if getattr(_upstream, "active", False) or not is_eager_tensor(ids):
        return
    import keras

    values = keras.ops.convert_to_numpy(ids)
    if values.size == 0:
        return
    low, high = values.min(), values.max()
    if low < 0 or high >= size:
        bad = high if high >= size else low
        raise ValueError(
            f"{what} {int(bad)} is outside the valid range [0, {size}). "
            f"Received ids of shape {tuple(values.shape)}."
        )


def check_inputs(model, x, y=None):
    """Check `x` (and targets `y`) against `model`'s tables: shapes always, values when concrete.

    Values are read only from concrete inputs (NumPy, eager tensors), outside
    `fit` and its kin (which check at entry); traced inputs get the static
    shape checks alone.

    >>> import kbert
    >>> model = kbert.models.bert_tiny(num_layers=1, vocabulary_size=30, max_positions=16)
    >>> check_inputs(model, {"token_ids": np.array([[30]]), "padding_mask": np.array([[1]])})
    Traceback (most recent call last):
    ...
    ValueError: Encoder input 'token_ids' holds 30 at position (0, 0), outside the allowed [0, 30) ...
    """
    values = _named_values(model, x, y)
    rules = _rules_for(model, values)
    if not rules:
        return
    # Only the entries with a rule: others (a list of per-layer head masks) stay as they are.
    values = {
        name: np.asarray(values[name]) if isinstance(values[name], (list, tuple, int, float))
        else values[name]
        for name in rules
    }
    sizes = _axis_sizes(model, values, rules)
    if getattr(_upstream, "active", False):
        return
    import keras

    owner = type(model).__name__
    for name, (rule, bound) in rules.items():
        allowed = _allowed(rule, bound, sizes)
        if allowed is not None and _is_concrete(values[name]):
            array = keras.ops.convert_to_numpy(values[name])
            _check_values(owner, name, rule, allowed, array)


def _is_dataset(data):
    """Whether `data` is a `tf.data.Dataset` (TensorFlow is not imported to tell)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


def _dynamic_axis_sizes(tf, owner, values, rules):
    """`{axis: (size tensor, name)}` and the assertions that the inputs agree on each axis."""
    sizes, assertions = {}, []
    for name, (rule, _) in rules.items():
        shape = tf.shape(values[name])
        for index, dim in enumerate(rule.dims):
            if dim not in sizes:
                sizes[dim] = (shape[index], name)
                continue
            assertions.append(
                tf.debugging.assert_equal(
                    shape[index],
                    sizes[dim][0],
                    message=f"{_MARKER}{_where(owner, name)} and '{sizes[dim][1]}' disagree on "
                    f"the {dim} length",
                )
            )
    return sizes, assertions


def _value_assertion(tf, owner, name, rule, allowed, tensor):
    """The assertion that `tensor` holds only allowed values (None where not checked)."""
    if not _range_checked(owner, name, rule, tensor.dtype.name):
        return None
    low, high, description = allowed
    if rule.kind == "mask":
        bad = tf.logical_and(tf.not_equal(tensor, 0), tf.not_equal(tensor, 1))
    else:
        bad = tf.cast(tensor, "int64") >= tf.cast(high, "int64")
        if low == 0:
            bad = tf.logical_or(bad, tensor < 0)
    first = tf.where(bad)[:1]
    return tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(bad)),
        [
            f"{_MARKER}{_where(owner, name)} holds",
            tf.gather_nd(tensor, first),
            "at position",
            first,
            f", outside the allowed {description}.",
        ],
    )


def _dataset_error_message(text):
    """The message of a failed tf.data assertion, in the words of the eager check."""
    text = text[text.index(_MARKER) + len(_MARKER) :].split("\n")[0].replace("\\'", "'")
    parts = re.match(r"(.*?)\] \[(.*?)\] \[at position\] \[\[(.*?)\]\] \[(.*?)\]", text)
    if parts is None:  # a shape assertion
        return text.split(".")[0] + "."
    where, value, position, allowed = parts.groups()
    position = tuple(int(index) for index in position.split())
    return f"{where} {value} at position {position}{allowed}"


def _split(element):
    """`(x, y)` of a dataset element: `x`, `(x,)`, `(x, y)` or `(x, y, sample_weight)`."""
    if isinstance(element, tuple):
        return element[0], element[1] if len(element) > 1 else None
    return element, None


def _check_element_spec(model, spec):
    """The checks a dataset's element spec allows before it is read: shapes and dtypes."""
    values = _named_values(model, *_split(spec))
    rules = _rules_for(model, values)
    _axis_sizes(model, values, rules)
    for name, (rule, _) in rules.items():
        _range_checked(type(model).__name__, name, rule, values[name].dtype.name)


def _dataset_check(model):
    """The function that `Dataset.map` runs: each element returned as is, after its checks."""
    tf = sys.modules["tensorflow"]
    owner = type(model).__name__

    def check(*element):
        values = _named_values(model, *_split(element if len(element) > 1 else element[0]))
        rules = _rules_for(model, values)
        sizes, assertions = _dynamic_axis_sizes(tf, owner, values, rules)
        for name, (rule, bound) in rules.items():
            allowed = _allowed(rule, bound, sizes)
            if allowed is not None:
                assertions.append(_value_assertion(tf, owner, name, rule, allowed, values[name]))
        with tf.control_dependencies([a for a in assertions if a is not None]):
            checked = tf.nest.map_structure(tf.identity, element)
        return checked if len(element) > 1 else checked[0]

    return check


def checked_data(model, x, y=None):
    """`(x, y)` after their checks: arrays and tensors now, a `tf.data.Dataset` as it is read.

    Other inputs (generators, `keras.utils.PyDataset`) pass unchecked here;
    eager calls still check them.
    """
    if _is_dataset(x):
        _check_element_spec(model, x.element_spec)
        return x.map(traced_as_written(_dataset_check(model))), y
    if isinstance(x, dict):
        check_inputs(model, x, y)
    return x, y


def _checked_validation(model, validation_data):
    if isinstance(validation_data, (tuple, list)) and validation_data:
        checked_data(model, *validation_data[:2])
        return validation_data
    return checked_data(model, validation_data)[0]


class _JaxWeightsGuard:
    """Keeps the weights that Keras' JAX loops detach, until the first batch has run.

    On JAX, `fit`, `evaluate` and `predict` take the variables' values out of
    the variables while they run and put the newest back at the end; a failed
    tf.data check at the first batch would leave the model without weights.
    Past that batch Keras keeps them itself (`jax_state_sync`). A Keras
    callback; `restore` puts them back after a failure.
    """

    def __init__(self, model):
        import keras

        self._callback = keras.callbacks.LambdaCallback()
        self.model = model
        self.saved = None
        for event in ("train", "test", "predict"):
            setattr(self._callback, f"on_{event}_batch_begin", self._save)
            setattr(self._callback, f"on_{event}_batch_end", self._release)

    def _save(self, batch, logs=None):
        if batch == 0 and self.saved is None:
            optimizer = getattr(self.model, "optimizer", None)
            variables = self.model.variables + (optimizer.variables if optimizer else [])
            self.saved = [(variable, variable.value) for variable in variables]

    def _release(self, batch, logs=None):
        self.saved = []

    def callbacks(self, kwargs):
        """`kwargs["callbacks"]` with this guard added."""
        return [*(kwargs.get("callbacks") or []), self._callback]

    def restore(self):
        self.model.jax_state_sync()
        for variable, value in self.saved or []:  # only set while the first batch runs
            variable.assign(value)


@contextlib.contextmanager
def _data_checked_at_entry(model, data, kwargs):
    """Value checks off inside; a failed tf.data check raised again as a `ValueError`.

    `kwargs` (of `fit` and its kin) get the JAX weights guard where Keras' loops detach the weights.
    """
    guard = None
    if _is_dataset(data) and loops_detach_variables():
        guard = _JaxWeightsGuard(model)
        kwargs["callbacks"] = guard.callbacks(kwargs)
    try:
        with checked_upstream():
            yield
    except Exception as error:  # the backend's own error type for a failed tf.data assertion
        message = str(error)
        if _MARKER not in message:
            raise
        if guard is not None:
            guard.restore()
        raise ValueError(_dataset_error_message(message)) from None


class InputChecks:
    """The mixin of kbert's models that checks the data given to `fit`, `evaluate` and `predict`.

    Put it before `keras.Model` in the bases; the model declares `INPUT_TABLE`
    (and `TARGET_TABLE`). Numerical results of valid inputs are unchanged.

    Example:
    >>> import kbert
    >>> model = kbert.models.bert_tiny(num_layers=1, vocabulary_size=30, max_positions=16)
    >>> model.predict({"token_ids": np.array([[1, 2]]), "padding_mask": np.array([[1]]),
    ...                "segment_ids": np.array([[0, 0]])}, verbose=0)
    Traceback (most recent call last):
    ...
    ValueError: Encoder input 'padding_mask' has sequence length 1, but 'token_ids' has 2: ...
    """

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        x, y = checked_data(self, x, y)
        validation_data = _checked_validation(self, validation_data)
        with _data_checked_at_entry(self, x, kwargs):
            return super().fit(x, y, *args, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        if not kwargs.get("_use_cached_eval_dataset"):  # `fit`'s validation: checked already
            x, y = checked_data(self, x, y)
        with _data_checked_at_entry(self, x, kwargs):
            return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        x, _ = checked_data(self, x)
        with _data_checked_at_entry(self, x, kwargs):
            return super().predict(x, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        checked_data(self, x, y)
        with checked_upstream():
            return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        checked_data(self, x, y)
        with checked_upstream():
            return super().test_on_batch(x, y, *args, **kwargs)

    def predict_on_batch(self, x):
        checked_data(self, x)
        with checked_upstream():
            return super().predict_on_batch(x)

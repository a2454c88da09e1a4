import inspect

import keras

from kbert.backend_utils import torch_compiling, torch_dtype


class DirectCall:
    """Mixin for kbert layers: on eager PyTorch a built layer's `__call__` goes straight to `call`.

    Keras' `Layer.__call__` converts and casts the inputs, fills `training`
    and masks from the call context, opens name and autocast scopes, and
    records losses, masks and graph nodes: 40–60 µs a call on PyTorch, where
    a `torch.nn.Module` call costs 5. A T5 decoding step makes about 130
    such calls, 8 ms of overhead a step on a small model, more than its
    matmuls. On PyTorch that bookkeeping changes nothing when all of these
    hold, and then the layer runs `call` directly:

    - the layer is built, not quantized, has no activity regularizer and no
      rematerialization mode, and computes in its variables' dtype (no
      autocast);
    - its first input is a PyTorch tensor (not a symbolic `KerasTensor`),
      integer or in the layer's input dtype, so Keras would not convert it;
    - `training` is passed explicitly, where `call` takes it (Keras would
      otherwise read it from the outer call); where it does not, a `training`
      argument (a functional model passes one to every layer) is left out.

    Otherwise, and on TensorFlow and JAX (which trace a layer once, then run
    compiled code), the call goes through Keras as usual.

    Put it first among the bases: `class FusedDense(DirectCall, keras.layers.Dense)`.

    >>> import kbert
    >>> layer = kbert.layers.FusedDense(2)
    >>> tuple(layer(keras.ops.ones((3, 4))).shape)  # the first call builds it, through Keras
    (3, 2)
    """

    def __call__(self, *args, **kwargs):
        if self._calls_directly(args, kwargs):
            if "training" in kwargs and not _call_takes_training(type(self)):
                kwargs = {name: value for name, value in kwargs.items() if name != "training"}
            return self.call(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def _calls_directly(self, args, kwargs):
        if keras.backend.backend() != "torch" or not self.built or not args:
            return False
        if not keras.ops.is_tensor(args[0]):  # a NumPy array, a symbolic KerasTensor
            return False
        input_dtype = _direct_input_dtype(self)
        return (
            input_dtype is not None
            and (args[0].dtype == input_dtype or not args[0].dtype.is_floating_point)
            and self.activity_regularizer is None
            and getattr(self, "_remat_mode", None) is None
            and ("training" in kwargs or not _call_takes_training(type(self)))
        )


def _direct_input_dtype(layer):
    """The PyTorch dtype of the layer's float inputs where its dtype policy allows a direct call, else None.

    A direct call needs no autocast (compute dtype = variable dtype) and no
    quantized call. Kept in the layer's `__dict__` (outside Keras' and
    PyTorch's attribute tracking) until its dtype policy object changes
    (`quantize()` and a new `dtype_policy` both replace it; a
    `DTypePolicyMap`, which changes in place, is read afresh each call):
    reading the policy's dtypes costs more than the rest of the check.
    Not kept while `torch.compile` traces (`torch_compiling`).
    """
    policy = layer.dtype_policy
    cached = layer.__dict__.get("_direct_input_dtype")
    if cached is not None and cached[0] is policy:
        return cached[1]
    allowed = layer.compute_dtype == layer.variable_dtype and layer.quantization_mode is None
    input_dtype = torch_dtype(layer.input_dtype) if allowed else None
    if not isinstance(policy, keras.dtype_policies.DTypePolicyMap) and not torch_compiling():
        layer.__dict__["_direct_input_dtype"] = (policy, input_dtype)
    return input_dtype


_TAKES_TRAINING = {}


def _call_takes_training(layer_class):
    """Whether `layer_class.call` has a `training` argument (cached per class, not while `torch_compiling`)."""
    if layer_class in _TAKES_TRAINING:
        return _TAKES_TRAINING[layer_class]
    takes_training = "training" in inspect.signature(layer_class.call).parameters
    if not torch_compiling():
        _TAKES_TRAINING[layer_class] = takes_training
    return takes_training

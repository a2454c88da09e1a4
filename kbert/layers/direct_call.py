from kbert.backend.ops import call_directly


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

    Otherwise, on TensorFlow and JAX (which trace a layer once, then run
    compiled code), and with PyTorch's fast paths off (`KBERT_FAST_PATHS=0`),
    the call goes through Keras as usual. The check is
    `kbert.backend.ops.call_directly`.

    Put it first among the bases: `class FusedDense(DirectCall, keras.layers.Dense)`.

    >>> import kbert, keras
    >>> layer = kbert.layers.FusedDense(2)
    >>> tuple(layer(keras.ops.ones((3, 4))).shape)  # the first call builds it, through Keras
    (3, 2)
    """

    def __call__(self, *args, **kwargs):
        direct = call_directly(self, args, kwargs)
        if direct is not None:
            return direct[0]
        return super().__call__(*args, **kwargs)

"""AdamW as PyTorch and the Adam paper define it, fused into one kernel on PyTorch."""

import keras
from keras import ops

from kbert.backend.ops import fused_adam, fused_adam_available
from kbert.backend.private_state import optimizer_slots


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(keras.optimizers.AdamW):
    """Adam with decoupled weight decay; one fused update per step on PyTorch.

    The constructor is `keras.optimizers.AdamW`'s. The update differs from
    Keras' in one place: `epsilon` is added after the bias correction, as in
    the Adam paper's Algorithm 1, `torch.optim.AdamW` and transformers,

        w ← w − lr·wd·w  (variables not excluded from decay)
        m ← β1·m + (1−β1)·g,   v ← β2·v + (1−β2)·g²
        w ← w − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)

    where Keras adds `ε` to `√v` before the correction. The rule is the same
    on every backend. On PyTorch's fast path the Adam update of all variables
    runs in PyTorch's fused kernel (`kbert.backend.torch_ops.fused_adam`):
    Keras' own PyTorch update chains `torch._foreach_*` calls, which on the
    CPU cost a bert_base training step about a second more; under
    `torch.compile`, the same rule as a few `torch._foreach_*` operations over
    every variable. With the fast paths off it is `update_step` below.
    `amsgrad` is not supported.

    Example:
    >>> import numpy as np
    >>> weight = keras.Variable(np.ones(3, "float32"))
    >>> optimizer = AdamW(learning_rate=0.1, weight_decay=0.0)
    >>> _ = optimizer.apply_gradients([(np.full(3, 0.5, "float32"), weight)])
    >>> [round(float(w), 4) for w in keras.ops.convert_to_numpy(weight)]
    [0.9, 0.9, 0.9]
    """

    def __init__(self, *args, amsgrad=False, **kwargs):
        if amsgrad:
            raise ValueError("kbert's AdamW has no amsgrad; use keras.optimizers.AdamW for it.")
        super().__init__(*args, **kwargs)

    def _apply_weight_decay(self, variables):
        if self.weight_decay:  # 0 decays nothing: skip the pass over every weight
            super()._apply_weight_decay(variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not fused_adam_available():
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        momentums, velocities = optimizer_slots(self, trainable_variables)
        step = ops.cast(self.iterations, "float32") + 1.0  # no host tensor for the 1
        fused_adam(
            [variable.value for variable in trainable_variables],
            list(grads),
            [momentum.value for momentum in momentums],
            [velocity.value for velocity in velocities],
            step,
            ops.cast(learning_rate, "float32"),
            (self.beta_1, self.beta_2),
            self.epsilon,
        )

    def update_step(self, gradient, variable, learning_rate):
        """The rule above for one variable (wherever the fused kernel is not used)."""
        dtype = variable.dtype
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        (momentum,), (velocity,) = optimizer_slots(self, [variable])
        self.assign_add(momentum, (gradient - momentum) * (1 - self.beta_1))
        self.assign_add(velocity, (ops.square(gradient) - velocity) * (1 - self.beta_2))
        first_correction = 1 - ops.power(ops.cast(self.beta_1, dtype), step)
        second_correction = 1 - ops.power(ops.cast(self.beta_2, dtype), step)
        denominator = ops.sqrt(velocity) / ops.sqrt(second_correction) + self.epsilon
        rate = ops.cast(learning_rate, dtype) / first_correction
        self.assign_sub(variable, rate * momentum / denominator)


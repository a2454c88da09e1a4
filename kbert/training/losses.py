"""Weighted losses for models that wrap a backbone: masked LM, token tagging, distillation.

Each is `Σ w·loss / (Σ w + 1e-5)` in float32, BERT's masked-LM form, so that
padding (weight 0) counts zero and an all-padding batch stays finite.
"""

import keras
from keras import ops

from kbert.backend.ops import replica_total

# BERT's `Σw·CE / (Σw + 1e-5)`: the epsilon keeps an all-padding batch finite.
WEIGHT_EPSILON = 1e-5


def weighted_cross_entropy(labels, logits, weights):
    """`Σ w·CE(labels, logits) / (Σ w + 1e-5)` in float32 (BERT's masked-LM loss).

    Prediction slots with weight 0 (padding) count zero.

    Example:
    >>> loss = weighted_cross_entropy(
    ...     keras.ops.array([[1, 0]]), keras.ops.zeros((1, 2, 4)), keras.ops.array([[1.0, 0.0]]))
    >>> round(float(loss), 4)  # log(4) for the one real slot
    1.3863
    """
    logits = ops.cast(logits, "float32")
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return weighted_mean(losses, weights)


def softened_kl(teacher_logits, student_logits, temperature):
    """`T² · KL(softmax(t/T) ‖ softmax(s/T))` over the last axis, in float32 (Hinton et al.'s soft targets).

    One value per row; `T²` restores the gradient scale that softening
    removes. Weigh and average it with `weighted_mean`.

    >>> kl = softened_kl(keras.ops.array([[0.0, 0.0]]), keras.ops.array([[0.0, 0.0]]), 2.0)
    >>> float(kl[0])  # equal logits: no divergence
    0.0
    """
    teacher = ops.log_softmax(ops.cast(teacher_logits, "float32") / temperature, axis=-1)
    student = ops.log_softmax(ops.cast(student_logits, "float32") / temperature, axis=-1)
    return ops.sum(ops.exp(teacher) * (teacher - student), axis=-1) * temperature**2


def weighted_mean(values, weights):
    """`Σ w·values / (Σ w + 1e-5)` in float32, over the global batch when replicas train in sync.

    With several replicas (`replica_total`), each returns
    `replicas · Σ_own w·values / (Σ_all w + 1e-5)`, whose average is the
    global batch's mean (each averaging its own shard's would not be).

    >>> mean = weighted_mean(keras.ops.array([2.0, 4.0]), keras.ops.array([1.0, 0.0]))
    >>> round(float(mean), 4)
    2.0
    """
    weights = ops.cast(weights, "float32")
    total, replicas = replica_total(ops.sum(weights))
    return replicas * ops.sum(ops.cast(values, "float32") * weights) / (total + WEIGHT_EPSILON)

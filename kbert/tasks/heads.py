"""What the fine-tuning task models share: the backbone call, head layers, the targets.

`TextClassifier`, `TokenClassifier`, `SpanQuestionAnswering` and
`MultipleChoice` run their backbone through `encode` (fine-tuned, or frozen
with the `EncoderFeatures` that `feature_route` makes), build their Dense and
Dropout layers like the backbone's with `head_dense` and `head_dropout`, and
read their targets with `task_targets` and `labelled`, so every task
initializes, checks its inputs and targets, and leaves out unlabelled rows
the same way.
"""

import keras
from keras import ops

from kbert.arguments import probability
from kbert.layers.dropout import Dropout
from kbert.layers.fused_dense import FusedDense
from kbert.models.encoder import Encoder
from kbert.tasks.encoder_features import FEATURES, EncoderFeatures
from kbert.training.task import backbone_inputs, require_keys

# Inputs every task needs; `segment_ids` may be left out (zeros), and a
# Longformer backbone's `global_attention_mask` too (no global tokens).
ENCODER_INPUTS = ("token_ids", "padding_mask")


def encode(backbone, inputs, owner, training=None, features=None):
    """Run `backbone` on the entries of the dict `inputs` it takes; its output dict.

    `owner` (the task's class name) is named in the error when an entry of
    `ENCODER_INPUTS` is missing. With `features` (an `EncoderFeatures` of a
    feature route), the backbone runs without dropout and returns its hidden
    states, and the output dict holds the features as `sequence_output` and
    their first ([CLS]) position as `pooled_output` (the pooler is not used).

    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=10, max_positions=8)
    >>> x = {"token_ids": keras.ops.ones((2, 4), "int32"), "padding_mask": keras.ops.ones((2, 4))}
    >>> tuple(encode(backbone, x, "Example")["pooled_output"].shape)
    (2, 128)
    """
    require_keys(inputs, ENCODER_INPUTS, "inputs", owner)
    if "global_attention_mask" in backbone.input and "global_attention_mask" not in inputs:
        inputs = {**inputs, "global_attention_mask": None}  # optional: the backbone skips it
    if features is None or not features.frozen:
        return backbone(backbone_inputs(backbone, inputs), training=training)
    layers = backbone.run_layers(backbone_inputs(backbone, inputs), hidden_states=True, training=False)
    sequence = features(layers["hidden_states"], padding_mask=inputs["padding_mask"])
    return {"sequence_output": sequence, "pooled_output": sequence[:, 0, :]}


def feature_route(backbone, features, owner):
    """The `EncoderFeatures` a task reads through `encode`; a feature route freezes `backbone`.

    `features` is one of `kbert.tasks.encoder_features.FEATURES`; on any but
    `"sequence_output"`, `backbone` (a kbert `Encoder`) is made
    non-trainable. `owner` is named in the error for another backbone.

    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1)
    >>> feature_route(backbone, "scalar_mix", "Example").output_dim, backbone.trainable
    (128, False)
    """
    if features in FEATURES[1:] and not isinstance(backbone, Encoder):
        raise ValueError(f"{owner} features={features!r} reads a kbert Encoder's hidden states; "
                         f"received a {type(backbone).__name__}.")
    route = EncoderFeatures(features, backbone.num_layers, backbone.hidden_dim,
                            dtype=backbone.dtype_policy, name="encoder_features")
    if route.frozen:
        backbone.trainable = False
    return route


def head_dense(backbone, units, name, activation=None):
    """A `Dense(units)` with the backbone's initializer range and dtype policy.

    >>> import kbert
    >>> head_dense(kbert.models.bert_tiny(num_layers=1), 3, "classifier").units
    3
    """
    return FusedDense(
        units,
        activation=activation,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=backbone.initializer_range),
        dtype=backbone.dtype_policy,
        name=name,
    )


def head_dropout(backbone, rate):
    """The head's `Dropout(rate)`, under the backbone's dtype policy.

    >>> import kbert
    >>> head_dropout(kbert.models.bert_tiny(num_layers=1), 0.1).rate
    0.1
    """
    return Dropout(probability("dropout", rate), dtype=backbone.dtype_policy, name="dropout")


def labelled(labels):
    """`(labels, weights)`: negative labels set to 0; float32 weights, 1 where the label is ≥ 0.

    A label of -1 marks what the loss and the metrics leave out: a token
    without a label, or a row that only pads a batch (`pad_final_batch` in
    `kbert.tasks.input_pipelines`).

    >>> labels, weights = labelled(keras.ops.array([2, -1, 0]))
    >>> keras.ops.convert_to_numpy(labels).tolist(), keras.ops.convert_to_numpy(weights).tolist()
    ([2, 0, 0], [1.0, 0.0, 1.0])
    """
    labels = ops.convert_to_tensor(labels)
    kept = labels >= 0  # operators: no tensor of a Python 0 from host data on PyTorch
    return labels * ops.cast(kept, labels.dtype), ops.cast(kept, "float32")


def task_targets(y, keys, owner, sample_weight=None):
    """`y` checked to be a dict holding `keys`; a `sample_weight` is refused.

    The task losses weight their terms through the targets (label -1 for a
    token left out), so a Keras `sample_weight` would be silently ignored.

    >>> task_targets({"labels": 1}, ("labels",), "Example")
    {'labels': 1}
    """
    if sample_weight is not None:
        raise ValueError(
            f"{owner} takes no sample_weight: leave it out of `fit` "
            "(the loss weights come from the targets)."
        )
    require_keys(y, keys, "targets", owner)
    return y

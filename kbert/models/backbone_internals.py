import keras

from kbert.backend.private_state import keras_history_operation
from kbert.input_checks import check_inputs


@keras.saving.register_keras_serializable(package="kbert")
class BackboneInternals(keras.Model):
    """A backbone's layers run so that they also return what happens inside.

    It shares the backbone's layers and weights (training one trains the
    other) and returns the backbone's outputs plus, on request, every
    layer's hidden states and attention probabilities, as transformers'
    `output_hidden_states` and `output_attentions` give them:

    - an `Encoder`: `hidden_states` `(batch, num_layers + 1, sequence,
      hidden)`, the embeddings then each block's output (before a pre-LN
      encoder's final LayerNorm); `attention_probabilities` `(batch,
      num_layers, heads, sequence, sequence)` (sparse attention: a dense
      map, 0 outside its pattern, for short sequences);
    - a `T5`: `encoder_hidden_states`, `decoder_hidden_states`,
      `encoder_attention_probabilities`, `decoder_attention_probabilities`
      and `cross_attention_probabilities` (see `T5.run_layers`).

    The probabilities are computed explicitly; the backbone's own graph stays
    as it is, fused attention kernel included, so only this model pays for
    them. Usually made with `backbone.with_internals()`.

    Args:
        backbone: a kbert `Encoder` or `T5` (a backbone with `run_layers`).
        hidden_states: return the hidden states.
        attention_probabilities: return the attention probabilities.

    Example:
    >>> import numpy as np
    >>> from kbert.models import Encoder
    >>> encoder = Encoder(vocabulary_size=100, num_layers=2, num_heads=2,
    ...                   hidden_dim=16, intermediate_dim=32, max_positions=64)
    >>> outputs = encoder.with_internals().predict(
    ...     {"token_ids": np.ones((1, 8), "int32"), "segment_ids": np.zeros((1, 8), "int32"),
    ...      "padding_mask": np.ones((1, 8), "int32")}, verbose=0)
    >>> outputs["hidden_states"].shape, outputs["attention_probabilities"].shape
    ((1, 3, 8, 16), (1, 2, 2, 8, 8))
    """

    def __init__(self, backbone, hidden_states=True, attention_probabilities=True, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.hidden_states = bool(hidden_states)
        self.attention_probabilities = bool(attention_probabilities)

    def call(self, inputs):
        required = [name for name, tensor in self.backbone.input.items()
                    if not keras_history_operation(tensor).optional]
        missing = [name for name in required if not isinstance(inputs, dict) or name not in inputs]
        if missing:
            raise ValueError(
                f"{type(self.backbone).__name__} internals need the inputs {required}; "
                f"missing {missing}."
            )
        check_inputs(self.backbone, inputs)
        return self.backbone.run_layers(inputs, self.hidden_states, self.attention_probabilities)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "hidden_states": self.hidden_states,
            "attention_probabilities": self.attention_probabilities,
        }

    @classmethod
    def from_config(cls, config):
        backbone = keras.saving.deserialize_keras_object(config.pop("backbone"))
        return cls(backbone, **config)


def per_layer_head_masks(head_mask, num_layers, name="head_mask"):
    """One head mask per layer (`(heads,)` or `(batch, heads)`) from a model's `head_mask`.

    `head_mask` is `(num_layers, heads)`, `(batch, num_layers, heads)`, a
    list of one mask per layer (layers with different head counts), or None
    (a list of None). `name` is named in the error.

    >>> [tuple(m.shape) for m in per_layer_head_masks(np.ones((3, 2, 4)), 2)]
    [(3, 4), (3, 4)]
    """
    if head_mask is None:
        return [None] * num_layers
    if isinstance(head_mask, (list, tuple)):
        masks, received = list(head_mask), f"a list of {len(head_mask)}"
    else:
        head_mask = keras.ops.convert_to_tensor(head_mask)
        received = f"shape {tuple(head_mask.shape)}"
        layer_axis = len(head_mask.shape) - 2  # (layers, heads) or (batch, layers, heads)
        masks = []
        if layer_axis in (0, 1):
            masks = [keras.ops.take(head_mask, i, axis=layer_axis)
                     for i in range(head_mask.shape[layer_axis])]
    if len(masks) != num_layers:
        raise ValueError(
            f"{name} must be (num_layers, num_heads), (batch, num_layers, num_heads) or a list "
            f"of num_layers={num_layers} per-layer masks; received {received}."
        )
    return masks

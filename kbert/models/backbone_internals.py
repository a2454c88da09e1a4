import keras

from kbert.input_checks import check_inputs


@keras.saving.register_keras_serializable(package="kbert")
class EncoderInternals(keras.Model):
    """An `Encoder`'s layers run so that they also return what happens inside.

    It shares the encoder's layers and weights (training one trains the
    other) and returns the encoder's outputs plus, on request:

    - `hidden_states` `(batch, num_layers + 1, sequence, hidden)`: the
      embeddings, then each block's output (before a pre-LN encoder's final
      LayerNorm), as transformers' `output_hidden_states` gives them;
    - `attention_probabilities` `(batch, num_layers, heads, sequence,
      sequence)`: each block's softmax, computed explicitly (dense attention
      only), as transformers' `output_attentions` gives them.

    The encoder's own graph stays as it is, fused attention kernel included:
    only this model pays for the internals. Usually made with
    `encoder.with_internals()`.

    Args:
        encoder: a `kbert.models.Encoder`.
        hidden_states: return `hidden_states`.
        attention_probabilities: return `attention_probabilities`.

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

    def __init__(self, encoder, hidden_states=True, attention_probabilities=True, **kwargs):
        if attention_probabilities and encoder.attention != "dense":
            raise ValueError(
                f"An encoder with {encoder.attention!r} attention returns no attention "
                "probabilities: only dense attention does."
            )
        super().__init__(**kwargs)
        self.encoder = encoder
        self.hidden_states = bool(hidden_states)
        self.attention_probabilities = bool(attention_probabilities)

    def call(self, inputs):
        check_inputs(self.encoder, inputs)
        inputs = self.encoder.fill_global_attention_mask(inputs)
        return self.encoder.run_layers(inputs, self.hidden_states, self.attention_probabilities)

    def get_config(self):
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "hidden_states": self.hidden_states,
            "attention_probabilities": self.attention_probabilities,
        }

    @classmethod
    def from_config(cls, config):
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        return cls(encoder, **config)

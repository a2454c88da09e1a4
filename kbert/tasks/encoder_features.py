import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.layers.scalar_mix import ScalarMix

# `features` values: the fine-tuned last layer, then the feature-based routes.
FEATURES = ("sequence_output", "scalar_mix", "scalar_mix_layer_norm", "last_four")
LAST_FOUR = 4


@keras.saving.register_keras_serializable(package="kbert")
class EncoderFeatures(keras.layers.Layer):
    """What a task head reads from its encoder's hidden states: the features of a frozen encoder.

    The task models' `features` argument (see `kbert.tasks.heads.encode`):

    - `"sequence_output"`: fine-tune the whole encoder, the head on its
      last layer (the default; this layer is then not called);
    - `"scalar_mix"`: ELMo's `γ · Σ_j softmax(s)_j · h_j` over the
      `num_layers + 1` hidden states (the embeddings, then each block's
      output), `s` and `γ` trained with the head (`kbert.layers.ScalarMix`);
    - `"scalar_mix_layer_norm"`: the same with each layer normalized first,
      over the non-padding tokens (AllenNLP's `do_layer_norm=True`);
    - `"last_four"`: the last four blocks' outputs concatenated, `4·H`
      wide: the BERT paper's best feature-based set for NER (§5.3).

    On the feature routes the encoder is frozen, as ELMo and the BERT paper
    use it: its weights are not trainable and it runs without dropout; only
    the mix and the head train. The task model sets `trainable = False` on
    the backbone it is given (pass it a copy to keep the original trainable).

    Args:
        features: one of `FEATURES`.
        num_layers: the encoder's blocks (`last_four` needs at least 4).
        hidden_dim: the encoder's width `H`.

    Call arguments:
        hidden_states: `(batch, num_layers + 1, sequence, H)`, as
            `Encoder.with_internals(attention_probabilities=False)` returns them.
        padding_mask: `(batch, sequence)`: the tokens the layer norm counts.

    Returns:
        `(batch, sequence, output_dim)`.

    Example:
    >>> features = EncoderFeatures("last_four", num_layers=4, hidden_dim=8)
    >>> states = keras.ops.ones((2, 5, 3, 8))
    >>> tuple(features(states, keras.ops.ones((2, 3))).shape), features.output_dim
    ((2, 3, 32), 32)
    """

    def __init__(self, features, num_layers, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        if features not in FEATURES:
            raise ValueError(f"features must be one of {list(FEATURES)}; received {features!r}.")
        self.features = features
        self.num_layers = positive_int("num_layers", num_layers)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        if features == "last_four" and num_layers < LAST_FOUR:
            raise ValueError(
                f"features='last_four' concatenates the last {LAST_FOUR} layers; the encoder has "
                f"only num_layers={num_layers}. Use 'scalar_mix' or a deeper encoder."
            )
        self.mix = None
        if features.startswith("scalar_mix"):
            self.mix = ScalarMix(num_layers + 1, layer_norm=features == "scalar_mix_layer_norm",
                                 dtype=self.dtype_policy, name="scalar_mix")
            self.mix.build((None, num_layers + 1, None, hidden_dim))
        self.built = True

    @property
    def frozen(self):
        """Whether the encoder is frozen: every route but `sequence_output`."""
        return self.features != "sequence_output"

    @property
    def output_dim(self):
        """The width of the features: `4·H` for `last_four`, else `H`."""
        return LAST_FOUR * self.hidden_dim if self.features == "last_four" else self.hidden_dim

    def call(self, hidden_states, padding_mask=None):
        if self.mix is not None:
            return self.mix(hidden_states, padding_mask=padding_mask)
        if self.features == "last_four":
            last = [hidden_states[:, i] for i in range(self.num_layers - LAST_FOUR + 1, self.num_layers + 1)]
            return ops.concatenate(last, axis=-1)
        raise ValueError("EncoderFeatures('sequence_output') is not called: the encoder's own output is used.")

    def compute_output_shape(self, hidden_states_shape, padding_mask_shape=None):
        return (hidden_states_shape[0], hidden_states_shape[2], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"features": self.features, "num_layers": self.num_layers,
                       "hidden_dim": self.hidden_dim})
        return config

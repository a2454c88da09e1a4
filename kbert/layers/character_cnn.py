import math

import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.layers.activations import get_activation
from kbert.layers.highway import Highway

# ELMo's "original" filters (width, count): 2048 features (docs/algorithms.md §14).
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


def _filter_pairs(filters):
    pairs = tuple((int(width), int(count)) for width, count in filters)
    if not pairs or any(width < 1 or count < 1 for width, count in pairs):
        raise ValueError(f"filters must be a non-empty list of positive (width, count) pairs; received {filters}.")
    return pairs


@keras.saving.register_keras_serializable(package="kbert")
class CharacterCNN(keras.layers.Layer):
    """ELMo's token encoder: a character CNN, highway layers and a projection.

    As AllenNLP's `_ElmoCharacterEncoder`: each token's character ids are
    embedded, each filter of width `w` slides over the characters without
    padding (`max_characters − w + 1` windows), its outputs are max-pooled over
    the windows and then passed through `activation`; the filters' features are
    concatenated, go through `num_highway` `Highway` layers and are projected
    linearly to `output_dim`. Id 0 is padding (AllenNLP's mapper adds 1 to
    every character id); a padding token (all zeros) is encoded like any other.

    Args:
        output_dim: width of the token representation (ELMo: 512).
        filters: `(width, count)` pairs (ELMo: `ELMO_FILTERS`).
        num_characters: rows of the character table (ELMo: 262).
        character_dim: width of a character embedding (ELMo: 16).
        num_highway: highway layers (ELMo: 2).
        activation: after the max-pooling, and in the highway layers (`"relu"`).

    Call arguments:
        character_ids: int `(batch, sequence, max_characters)`.

    Returns:
        `(batch, sequence, output_dim)`.

    Example:
    >>> encoder = CharacterCNN(output_dim=8, filters=[(1, 4), (2, 4)], num_characters=262)
    >>> tuple(encoder(keras.ops.ones((2, 3, 50), "int32")).shape)
    (2, 3, 8)
    """

    def __init__(self, output_dim, filters=ELMO_FILTERS, num_characters=262, character_dim=16,
                 num_highway=2, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.output_dim = positive_int("output_dim", output_dim)
        self.filters = _filter_pairs(filters)
        self.num_characters = positive_int("num_characters", num_characters)
        self.character_dim = positive_int("character_dim", character_dim)
        self.num_highway = positive_int("num_highway", num_highway)
        self.activation = activation
        self.activation_fn = get_activation(activation)
        self.num_features = sum(count for _, count in self.filters)
        self.character_embedding = keras.layers.Embedding(
            self.num_characters, self.character_dim,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            dtype=self.dtype_policy, name="character_embedding",
        )
        self.highway = Highway(num_highway, activation, dtype=self.dtype_policy, name="highway")
        self.projection = keras.layers.Dense(output_dim, dtype=self.dtype_policy, name="projection")

    def build(self, character_ids_shape):
        max_characters = character_ids_shape[-1]
        widest = max(width for width, _ in self.filters)
        if max_characters is not None and max_characters < widest:
            raise ValueError(
                f"CharacterCNN's widest filter ({widest}) is wider than the {max_characters} "
                "characters per token."
            )
        self.character_embedding.build(character_ids_shape)
        self.kernels, self.biases = [], []
        for width, count in self.filters:
            # bilm-tf's initialisation for ReLU filters: N(0, 1 / (width · character_dim)).
            stddev = math.sqrt(1.0 / (width * self.character_dim))
            self.kernels.append(self.add_weight(
                shape=(width, self.character_dim, count), name=f"kernel_{width}",
                initializer=keras.initializers.RandomNormal(stddev=stddev)))
            self.biases.append(self.add_weight(shape=(count,), name=f"bias_{width}", initializer="zeros"))
        self.highway.build((None, self.num_features))
        self.projection.build((None, self.num_features))
        self.built = True

    def call(self, character_ids):
        characters = self.character_embedding(character_ids)  # (..., chars, character_dim)
        features = [self._pooled_filter(characters, kernel, bias)
                    for kernel, bias in zip(self.kernels, self.biases)]
        features = ops.concatenate(features, axis=-1)
        return self.projection(self.highway(features))

    def _pooled_filter(self, characters, kernel, bias):
        """One filter bank: the valid convolution over the characters, max-pooled, activated."""
        width = kernel.shape[0]
        windows = characters.shape[-2] - width + 1
        stacked = ops.concatenate([characters[..., k : k + windows, :] for k in range(width)], axis=-1)
        kernel = ops.reshape(ops.cast(kernel, self.compute_dtype), (width * self.character_dim, -1))
        convolved = ops.matmul(stacked, kernel) + ops.cast(bias, self.compute_dtype)
        # `amax`: Keras' PyTorch `max` breaks a `torch.compile` graph (`isinstance` on `.values`).
        return self.activation_fn(ops.amax(convolved, axis=-2))

    def compute_output_shape(self, character_ids_shape):
        return tuple(character_ids_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "output_dim": self.output_dim,
            "filters": [list(pair) for pair in self.filters],
            "num_characters": self.num_characters,
            "character_dim": self.character_dim,
            "num_highway": self.num_highway,
            "activation": self.activation,
        })
        return config

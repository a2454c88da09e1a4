import keras
from keras import ops

from kbert.backend_utils import check_ids_in_range
from kbert.layers.initializers import clone_initializer
from kbert.layers.reversible_embedding import tied_embedding_dim
from kbert.layers.activations import get_activation, serialize_activation


@keras.saving.register_keras_serializable(package="kbert")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-LM head: gather masked positions, transform, decode to the vocabulary.

    `logits = LN(act(Dense(h[positions]))) · Wtokᵀ + b`. With `token_embedding`
    (a `ReversibleEmbedding`, usually the backbone's) the decoder is tied to the
    input table, as in BERT; without it the head owns a decoder matrix.
    The transform width is the table's width, so ALBERT and ELECTRA
    generators (embedding 128 < hidden) project down before decoding.

    `token_embedding` is a reference to another model's layer and is not part
    of `get_config`: a model that owns both passes it again when rebuilt.

    Args:
        vocabulary_size: size of the output vocabulary.
        token_embedding: optional `ReversibleEmbedding` to tie the decoder to.
        embedding_dim: transform width when untied; defaults to the input width.
        activation: transform activation (BERT: exact GELU).
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: initializer of the transform (and untied decoder).

    Call arguments:
        inputs: hidden states `(batch, sequence, hidden)`.
        mask_positions: int `(batch, predictions)`: indices into `sequence`.

    Example:
    >>> head = MaskedLMHead(vocabulary_size=50)
    >>> logits = head(keras.ops.ones((2, 7, 16)), keras.ops.zeros((2, 3), "int32"))
    >>> tuple(logits.shape)
    (2, 3, 50)
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        embedding_dim=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.token_embedding = token_embedding
        self.embedding_dim = tied_embedding_dim(token_embedding, self.vocabulary_size, embedding_dim)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape, mask_positions_shape=None):
        if len(inputs_shape) != 3:
            raise ValueError(
                "MaskedLMHead expects inputs of shape (batch, sequence, hidden); "
                f"received shape {tuple(inputs_shape)}."
            )
        width = self.embedding_dim or inputs_shape[-1]
        gathered_shape = (inputs_shape[0], None, inputs_shape[-1])
        self.transform = keras.layers.Dense(
            width,
            activation=get_activation(self.activation),
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="transform",
        )
        self.transform.build(gathered_shape)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(gathered_shape[:-1] + (width,))
        self.decoder = None
        if self.token_embedding is None:
            self.decoder = keras.layers.Dense(
                self.vocabulary_size,
                use_bias=False,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name="decoder",
            )
            self.decoder.build(gathered_shape[:-1] + (width,))
        self.bias = self.add_weight(
            name="bias", shape=(self.vocabulary_size,), initializer="zeros"
        )
        self.built = True

    def call(self, inputs, mask_positions):
        if len(mask_positions.shape) != 2:
            raise ValueError(
                "mask_positions must have shape (batch, predictions); "
                f"received shape {tuple(mask_positions.shape)}."
            )
        if inputs.shape[1] is not None:
            check_ids_in_range(mask_positions, inputs.shape[1], "Mask position")
        positions = ops.cast(mask_positions, "int32")[:, :, None]
        x = ops.take_along_axis(inputs, positions, axis=1)
        x = self.layer_norm(self.transform(x))
        if self.token_embedding is not None:
            logits = self.token_embedding(x, reverse=True)
        else:
            logits = self.decoder(x)
        return logits + ops.cast(self.bias, logits.dtype)

    def compute_output_shape(self, inputs_shape, mask_positions_shape):
        return tuple(mask_positions_shape) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config

"""ELECTRA pretraining: a small generator fills the masks, the discriminator spots replacements."""

import keras
from keras import ops

from kbert.arguments import number, positive_int, positive_number
from kbert.backend.ops import scale_loss_for_replicas, uniform_like
from kbert.input_checks import positions
from kbert.layers.activations import get_activation
from kbert.layers.encoder_block import EncoderBlock
from kbert.pretraining.bert_pretrainer import (
    MASKED_LM_INPUTS,
    masked_lm_head_for,
    masked_lm_loss,
    masked_lm_targets,
)
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.losses import weighted_mean
from kbert.training.task import Task, backbone_inputs, require_keys


def _scatter_into(sequence, positions, values, keep):
    """`sequence` with `values[b, p]` written at `positions[b, p]` where `keep[b, p]`.

    Static shapes (a one-hot over the sequence); when two kept slots name the
    same position the first one wins.
    """
    length = ops.shape(sequence)[1]
    hits = ops.one_hot(ops.cast(positions, "int32"), length, dtype="int32")
    hits = hits * ops.cast(keep, "int32")[:, :, None]  # (batch, predictions, sequence)
    first = ops.argmax(hits, axis=1)  # (batch, sequence)
    written = ops.take_along_axis(ops.cast(values, sequence.dtype), first, axis=1)
    return ops.where(ops.amax(hits, axis=1) > 0, written, sequence)  # amax: compiles on PyTorch


@keras.saving.register_keras_serializable(package="kbert")
class ElectraPretrainer(Task):
    """ELECTRA: generator masked LM plus replaced-token detection by the discriminator.

    The generator is a narrow masked LM built here: the discriminator's own
    `TextEmbedding` layer (shared), a Dense projection to the generator's
    width when it differs from the embedding output width, its own
    `generator_num_layers` post-LN `EncoderBlock` blocks, and a
    `MaskedLMHead` tied to the shared token table (its transform projects to
    the table width E). At the masked positions it samples fakes by
    Gumbel-max from `logits / temperature` under stop-gradient
    (`keras.random` with this model's `SeedGenerator`; on PyTorch's fast path
    PyTorch's global generator, `kbert.backend.ops.uniform_like`); the sampled ids are
    written into `token_ids` and the discriminator (the backbone) reads the
    result. Its head, `Dense(H, activation) → Dense(1)`, scores every token;
    the label is 1 exactly where the token differs from the original.

    Sharing: the whole `TextEmbedding` instance is shared, i.e. the token,
    position and segment tables and the embedding LayerNorm, as in ELECTRA's
    released models (`electra/embeddings/*` is one scope for both). When the
    discriminator has a factorized embedding (E < H) its E→H projection lives
    inside `TextEmbedding` and is therefore shared as well, whereas ELECTRA
    gives each network its own `embeddings_project`; the generator's own
    Dense then maps H to the generator width only if the two differ.

    Masked-slot convention (ELECTRA's): prediction slots that point at
    position 0 are never written into the discriminator input, because
    position 0 is `[CLS]`, never a masking candidate, and padding slots point
    there. Real predictions must name distinct positions.

    `compute_loss` returns `L_MLM + discriminator_weight · L_disc`:
    `L_MLM = Σ w·CE / (Σ w + 1e-5)` over the generator's predictions and
    `L_disc` the sigmoid binary cross-entropy averaged over non-padding tokens,
    both in float32. Metrics: `mlm_loss`, `mlm_accuracy`,
    `discriminator_loss`, `discriminator_accuracy`.

    Args:
        discriminator: a `kbert.models.Encoder`, the model kept after
            pretraining; built with `use_pooler=False` (ELECTRA has none).
        generator_num_layers: encoder blocks of the generator.
        generator_hidden_dim: generator width (ELECTRA: H/4 small and large, H/3 base).
        generator_num_heads: generator attention heads (ELECTRA: width / 64).
        generator_intermediate_dim: generator feed-forward width (4 × width).
        discriminator_weight: weight of the replaced-token-detection loss (50).
        temperature: sampling temperature of the generator (1).
        seed: seed of the sampling `SeedGenerator` (PyTorch's fast path draws from
            PyTorch's global generator, which `keras.utils.set_random_seed` seeds).

    The generator blocks take the discriminator's dropout, activation,
    LayerNorm epsilon and initializer range, and dense attention.

    Call arguments:
        inputs: dict with the discriminator's inputs (`token_ids` already
            masked, `segment_ids`, `padding_mask`) and `mask_positions` int
            `(batch, predictions)`.
        training: whether dropout is active (sampling always happens).

    Returns:
        dict with `mlm_logits` `(batch, predictions, vocabulary)` (generator),
        `sampled_ids` int `(batch, predictions)`, `discriminator_ids` int
        `(batch, sequence)` (the discriminator's input) and
        `discriminator_logits` `(batch, sequence)`.

    Targets: dict with `mask_ids` int `(batch, predictions)` (the original
    ids) and `mask_weights` float `(batch, predictions)`.

    Example:
    >>> import kbert
    >>> discriminator = kbert.models.Encoder(vocabulary_size=60, num_layers=1,
    ...     num_heads=2, hidden_dim=8, intermediate_dim=16, max_positions=16, use_pooler=False)
    >>> model = ElectraPretrainer(discriminator, generator_num_layers=1,
    ...     generator_hidden_dim=4, generator_num_heads=1, generator_intermediate_dim=8)
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> outputs = model({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones,
    ...                  "mask_positions": keras.ops.ones((2, 3), "int32")})
    >>> tuple(outputs["discriminator_logits"].shape)
    (2, 8)

    References:
        - [Clark et al., 2020](https://arxiv.org/abs/2003.10555) (ELECTRA)
    """

    # What `kbert.input_checks` checks beside the discriminator's inputs.
    CHECKED_BACKBONE = "discriminator"
    INPUT_TABLE = {"mask_positions": positions()}
    TARGET_TABLE = masked_lm_targets("discriminator")

    def __init__(
        self,
        discriminator,
        generator_num_layers,
        generator_hidden_dim,
        generator_num_heads,
        generator_intermediate_dim,
        discriminator_weight=50.0,
        temperature=1.0,
        seed=None,
        **kwargs,
    ):
        number("discriminator_weight", discriminator_weight, 0)
        positive_number("temperature", temperature)
        super().__init__(dtype=discriminator.dtype_policy, **kwargs)
        self.discriminator = discriminator
        self.generator_num_layers = positive_int("generator_num_layers", generator_num_layers)
        self.generator_intermediate_dim = positive_int("generator_intermediate_dim", generator_intermediate_dim)
        self.generator_num_heads = positive_int("generator_num_heads", generator_num_heads)
        self.generator_hidden_dim = positive_int("generator_hidden_dim", generator_hidden_dim)
        if generator_hidden_dim % generator_num_heads:
            raise ValueError(
                f"generator_hidden_dim={generator_hidden_dim} is not divisible by "
                f"generator_num_heads={generator_num_heads}."
            )
        self.discriminator_weight = discriminator_weight
        self.temperature = temperature
        self.seed = seed

        dtype = discriminator.dtype_policy

        def initializer():
            return keras.initializers.TruncatedNormal(stddev=discriminator.initializer_range)

        self.generator_embeddings = discriminator.embeddings
        self.generator_projection = None
        if generator_hidden_dim != discriminator.embeddings.hidden_dim:
            self.generator_projection = keras.layers.Dense(
                generator_hidden_dim,
                kernel_initializer=initializer(),
                dtype=dtype,
                name="generator_projection",
            )
        self.generator_layers = [
            EncoderBlock(
                num_heads=generator_num_heads,
                intermediate_dim=generator_intermediate_dim,
                dropout=discriminator.dropout,
                attention_dropout=discriminator.attention_dropout,
                activation=discriminator.activation,
                layer_norm_epsilon=discriminator.layer_norm_epsilon,
                kernel_initializer=initializer(),
                dtype=dtype,
                name=f"generator_layer_{index}",
            )
            for index in range(generator_num_layers)
        ]
        self.generator_head = masked_lm_head_for(discriminator, name="generator_head")
        self.discriminator_dense = keras.layers.Dense(
            discriminator.hidden_dim,
            activation=get_activation(discriminator.activation),
            kernel_initializer=initializer(),
            dtype=dtype,
            name="discriminator_dense",
        )
        self.discriminator_output = keras.layers.Dense(
            1, kernel_initializer=initializer(), dtype=dtype, name="discriminator_output"
        )
        self.seed_generator = keras.random.SeedGenerator(seed)
        add_objective_metrics(self, "mlm")
        add_objective_metrics(self, "discriminator", accuracy=keras.metrics.BinaryAccuracy)
        self.build()

    def build(self, input_shape=None):
        """Build the generator and the heads (done at construction)."""
        embedded = (None, None, self.discriminator.embeddings.hidden_dim)
        generator_shape = (None, None, self.generator_hidden_dim)
        if self.generator_projection is not None:
            self.generator_projection.build(embedded)
        for layer in self.generator_layers:
            layer.build(generator_shape)
        self.generator_head.build(generator_shape)
        self.discriminator_dense.build((None, None, self.discriminator.hidden_dim))
        self.discriminator_output.build((None, None, self.discriminator.hidden_dim))

    def sample(self, logits):
        """Gumbel-max draw from `softmax(logits / temperature)`, under stop-gradient.

        Returns int32 ids of the shape of `logits` without its last axis.
        """
        logits = ops.stop_gradient(ops.cast(logits, "float32")) / self.temperature
        uniform = uniform_like(logits, self.seed_generator)
        gumbel = -ops.log(-ops.log(uniform + 1e-9) + 1e-9)
        return ops.cast(ops.argmax(logits + gumbel, axis=-1), "int32")

    def call(self, inputs, training=None):
        require_keys(inputs, MASKED_LM_INPUTS, "inputs", "ElectraPretrainer")
        token_ids = inputs["token_ids"]
        padding_mask = inputs["padding_mask"]
        mask_positions = inputs["mask_positions"]
        if len(mask_positions.shape) != 2:
            raise ValueError(
                "mask_positions must have shape (batch, predictions); "
                f"received shape {tuple(mask_positions.shape)}."
            )

        x = self.generator_embeddings(
            token_ids,
            segment_ids=inputs.get("segment_ids"),
            padding_mask=padding_mask,
            training=training,
        )
        if self.generator_projection is not None:
            x = self.generator_projection(x)
        for layer in self.generator_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        mlm_logits = self.generator_head(x, mask_positions)

        sampled_ids = self.sample(mlm_logits)
        discriminator_ids = _scatter_into(
            token_ids, mask_positions, sampled_ids, keep=ops.greater(mask_positions, 0)
        )
        # All tensors: the sampled ids are, and Keras refuses a call that mixes them with NumPy inputs.
        discriminator_inputs = {name: value if value is None else ops.convert_to_tensor(value)
                                for name, value in backbone_inputs(self.discriminator, inputs).items()}
        discriminator_inputs["token_ids"] = discriminator_ids
        sequence = self.discriminator(discriminator_inputs, training=training)["sequence_output"]
        logits = self.discriminator_output(self.discriminator_dense(sequence))
        return {
            "mlm_logits": mlm_logits,
            "sampled_ids": sampled_ids,
            "discriminator_ids": discriminator_ids,
            "discriminator_logits": ops.squeeze(logits, axis=-1),
        }

    def discriminator_labels(self, x, y, y_pred):
        """Float32 `(batch, sequence)`: 1 where the discriminator's input differs from the original.

        The original sequence is `x["token_ids"]` with `y["mask_ids"]` written
        at the real (weight > 0) prediction slots, so the label is 1 exactly
        where a sampled id differs from the original id, and 0 elsewhere.
        """
        real = ops.greater(y["mask_weights"], 0)
        original = _scatter_into(x["token_ids"], x["mask_positions"], y["mask_ids"], keep=real)
        replaced = ops.not_equal(ops.cast(y_pred["discriminator_ids"], original.dtype), original)
        return ops.cast(replaced, "float32")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`L_MLM + discriminator_weight · L_disc` in float32; `sample_weight` is unused."""
        require_keys(y, ("mask_ids", "mask_weights"), "targets", "ElectraPretrainer")
        mlm_loss = masked_lm_loss(self, y, y_pred["mlm_logits"])
        labels = self.discriminator_labels(x, y, y_pred)
        logits = ops.cast(y_pred["discriminator_logits"], "float32")
        token_weights = ops.cast(x["padding_mask"], "float32")
        # Binary cross-entropy from logits as softplus(z) − y·z (exact and stable): Keras' PyTorch
        # `binary_crossentropy` asks `torch.backends.mps.is_available()`, which breaks a compiled graph.
        losses = ops.softplus(logits) - labels * logits
        discriminator_loss = weighted_mean(losses, token_weights)
        probabilities = ops.sigmoid(logits)
        track_objective(
            self, "discriminator", discriminator_loss, labels, probabilities, token_weights
        )
        return scale_loss_for_replicas(mlm_loss + self.discriminator_weight * discriminator_loss)

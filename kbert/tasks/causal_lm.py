"""Causal language modelling over a decoder-only backbone: next-token training and generation."""

import keras
from keras import ops

from kbert.backend.ops import scale_loss_for_replicas
from kbert.text.text_checks import check_texts
from kbert.generation.causal_lm_generator import CausalLMGenerator
from kbert.training.objective_metrics import add_objective_metrics, track_objective
from kbert.training.losses import weighted_cross_entropy
from kbert.tasks.generating_task import GeneratingTask
from kbert.training.task import require_keys

INPUTS = ("token_ids", "padding_mask")


def next_token_weights(padding_mask):
    """Weights `(batch, length - 1)` of the next-token predictions: 1 where the token read
    and the token predicted are both real (left or right padding alike).

    >>> keras.ops.convert_to_numpy(next_token_weights(keras.ops.array([[0, 1, 1, 1]]))).tolist()
    [[0.0, 1.0, 1.0]]
    """
    padding_mask = ops.cast(padding_mask, "float32")
    return padding_mask[:, :-1] * padding_mask[:, 1:]


@keras.saving.register_keras_serializable(package="kbert")
class CausalLM(GeneratingTask):
    """A decoder-only backbone with its next-token loss, and its generation entry point.

    Called on `{"token_ids", "padding_mask"}` it returns the backbone's
    vocabulary logits `(batch, length, vocab)`. Trained with `fit(inputs)`
    (no targets: each position predicts the token after it, GPT's objective);
    the loss is the mean token cross-entropy, in float32, over the
    predictions whose input and target tokens are both real
    (`next_token_weights`; with `sample_weight`, each example's tokens weigh
    its weight), reported with the next-token accuracy as `clm_loss` and
    `clm_accuracy`. `generate` continues left-padded prompts (dicts with
    `token_ids` and `padding_mask`) with `kbert.generation.CausalLMGenerator`
    (see `GeneratingTask.generate`).

    Args:
        backbone: a `kbert.models.GPT2` (any backbone with its inputs, a
            `logits` output and the causal generation interface).

    Example:
    >>> import numpy as np, kbert
    >>> lm = CausalLM(kbert.models.GPT2(vocabulary_size=20, num_layers=1, num_heads=2,
    ...                                 hidden_dim=8, intermediate_dim=16, max_positions=16,
    ...                                 end_id=0))
    >>> text = {"token_ids": np.array([[5, 6, 7, 8]]), "padding_mask": np.ones((1, 4), "int32")}
    >>> lm.compile(optimizer="adam")
    >>> history = lm.fit(text, verbose=0)
    >>> lm.generate(text, max_new_tokens=3).shape
    (1, 3)
    """

    GENERATOR = CausalLMGenerator

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        add_objective_metrics(self, "clm")
        self.build()

    def call(self, inputs, training=None):
        require_keys(inputs, INPUTS, "inputs", "CausalLM")
        return self.backbone({name: inputs[name] for name in INPUTS}, training=training)["logits"]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean next-token cross-entropy of the logits against the inputs' own next tokens."""
        if y is not None:
            raise ValueError(
                "CausalLM trains on its inputs alone (each token predicts the next); pass no "
                "targets to fit."
            )
        require_keys(x, INPUTS, "inputs", "CausalLM")
        targets = x["token_ids"][:, 1:]
        logits = ops.cast(y_pred[:, :-1], "float32")
        weights = next_token_weights(x["padding_mask"])
        if sample_weight is not None:
            weights = weights * ops.cast(ops.reshape(sample_weight, (-1, 1)), "float32")
        loss = weighted_cross_entropy(targets, logits, weights)
        track_objective(self, "clm", loss, targets, logits, weights)
        return scale_loss_for_replicas(loss)

    def _generate_text(self, prompts, max_new_tokens, strategy, options):
        preprocessor = self.text_preprocessor("generate")
        prompts, single = check_texts(prompts, "prompt")
        generated = self._generate_by_length(preprocessor.token_ids(prompts), ("token_ids", "padding_mask"), True,
                                             max_new_tokens, strategy, options)
        texts = preprocessor.decode(generated, self.backbone.end_id)
        return texts[0] if single else texts

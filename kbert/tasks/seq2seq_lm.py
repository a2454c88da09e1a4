"""Sequence-to-sequence language modelling over an encoder-decoder backbone."""

import keras
from keras import ops

from kbert.backend.ops import clip, replica_total, scale_loss_for_replicas
from kbert.text.text_checks import check_texts
from kbert.input_checks import ids
from kbert.generation.seq2seq_generator import Seq2SeqGenerator
from kbert.tasks.generating_task import GeneratingTask


@keras.saving.register_keras_serializable(package="kbert")
class Seq2SeqLM(GeneratingTask):
    """An encoder-decoder backbone with its language-model loss, and its generation entry point.

    Called on the backbone's dict inputs (`encoder_token_ids`,
    `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask`), it
    returns the backbone's vocabulary logits `(batch, target_length, vocab)`.
    Trained with `fit(inputs, target_ids)` under teacher forcing (the decoder
    reads the targets shifted right: `kbert.models.seq2seq_inputs`, or the
    batches of `kbert.pretraining.SpanCorruption.dataset` and
    `kbert.pretraining.BartDenoising.dataset`); the loss is the
    mean token cross-entropy, in float32, over the targets that are not the
    backbone's `pad_id` (with `sample_weight`, each example's tokens weigh
    its weight). `generate` decodes with `kbert.generation.Seq2SeqGenerator`
    from dicts with `encoder_token_ids` and `encoder_padding_mask` (see
    `GeneratingTask.generate`).

    Args:
        backbone: a `kbert.models.T5` or `kbert.models.BART` (any backbone
            with T5's inputs, a `logits` output and its generation interface).

    Example:
    >>> import numpy as np, kbert
    >>> lm = Seq2SeqLM(kbert.models.T5(vocabulary_size=20, num_layers=1, num_heads=2,
    ...                                hidden_dim=8, intermediate_dim=16))
    >>> sources, targets = np.array([[5, 6, 1]]), np.array([[7, 1, 0]])
    >>> lm.compile(optimizer="adam")
    >>> history = lm.fit(kbert.models.seq2seq_inputs(sources, targets), targets, verbose=0)
    >>> lm.generate({"encoder_token_ids": sources, "encoder_padding_mask": [[1, 1, 1]]},
    ...             max_new_tokens=4).shape
    (1, 4)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    TARGET_TABLE = {"target_ids": ids("backbone.vocabulary_size", ("batch", "decoder_sequence"))}

    GENERATOR = Seq2SeqGenerator

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        self.build()

    def call(self, inputs, training=None):
        return self.backbone(inputs, training=training)["logits"]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean token cross-entropy of the logits against target ids `y`, pad targets ignored."""
        if y is None:
            raise ValueError(
                "Seq2SeqLM trains on (inputs, target_ids) pairs; received no target ids."
            )
        logits = ops.cast(y_pred, "float32")
        losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        # Operators, not `ops.not_equal(y, 0)`: Keras makes a tensor of a Python
        # number from host data at every call on PyTorch.
        weights = ops.cast(y != self.backbone.pad_id, "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(ops.reshape(sample_weight, (-1, 1)), "float32")
        total, replicas = replica_total(ops.sum(weights))  # the global batch's count (docs/algorithms.md)
        loss = replicas * ops.sum(losses * weights) / clip(total, 1.0, float("inf"))
        return scale_loss_for_replicas(loss)

    def _generate_text(self, sources, max_new_tokens, strategy, options):
        preprocessor = self.text_preprocessor("generate")
        sources, single = check_texts(sources, "source")
        generated = self._generate_by_length(preprocessor.source_ids(sources),
                                             ("encoder_token_ids", "encoder_padding_mask"), False,
                                             max_new_tokens, strategy, options)
        texts = preprocessor.decode(generated, self.backbone.end_id)
        return texts[0] if single else texts

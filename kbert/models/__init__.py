"""Backbones and the builder functions users call."""

from kbert.models.bart import BART
from kbert.models.elmo import ELMo
from kbert.models.encoder import ATTENTION_LAYERS, Encoder
from kbert.models.backbone_internals import BackboneInternals
from kbert.models.long_context import to_long_context
from kbert.models.presets import (
    BART_PRESETS,
    ELMO_PRESETS,
    GPT2_PRESETS,
    PRESETS,
    T5_PRESETS,
    XLNET_PRESETS,
    albert_base,
    albert_large,
    albert_xlarge,
    albert_xxlarge,
    bart_base,
    bart_large,
    bart_tiny,
    bert_base,
    bert_large,
    bert_medium,
    bert_mini,
    bert_small,
    bert_tiny,
    bigbird_base,
    build,
    distilbert_base,
    electra_base,
    electra_base_generator,
    electra_large,
    electra_large_generator,
    electra_small,
    electra_small_generator,
    elmo_original,
    elmo_small,
    gpt2_base,
    gpt2_large,
    gpt2_medium,
    gpt2_tiny,
    longformer_base,
    roberta_base,
    roberta_large,
    t5_base,
    t5_large,
    t5_small,
    t5_tiny,
    t5_v1_1_base,
    t5_v1_1_small,
    xlnet_base,
    xlnet_large,
    xlnet_tiny,
)
from kbert.models.gpt2 import GPT2
from kbert.models.t5 import T5, seq2seq_inputs
from kbert.models.xlnet import XLNet


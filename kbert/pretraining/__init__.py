"""Pretraining: masking, example building, the objectives' models, optimisers, the main job.

The example builders (`MaskedLMMasker`, `SpanMasker`, `PermutationMasker`, `pretraining_dataset`,
`SpanCorruption`, `T5Objective`, `BartDenoising`)
run in `tf.data` on any backend and import TensorFlow only when called; the
pretrainer models run on the Keras backend.

>>> from kbert.models import bert_tiny
>>> from kbert.pretraining import BertPretrainer, create_optimizer
>>> model = BertPretrainer(bert_tiny(vocabulary_size=100), pair_objective="nsp")
>>> model.compile(optimizer=create_optimizer("adamw", 1e-4, total_steps=10, warmup_steps=1))
"""

from kbert.training.adam_w import AdamW
from kbert.pretraining.bart_denoising import BartDenoising, bart_examples
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.pretraining.bilm_dataset import bilm_dataset, learn_word_vocabulary
from kbert.pretraining.bilm_pretrainer import BiLMPretrainer
from kbert.pretraining.distillation_trainer import DistillationTrainer, init_student_from_teacher
from kbert.pretraining.electra_pretrainer import ElectraPretrainer
from kbert.pretraining.masked_lm_masker import MaskedLMMasker
from kbert.pretraining.masker import Masker
from kbert.pretraining.permutation_masker import PermutationMasker
from kbert.training.optimizers import create_optimizer
from kbert.pretraining.pretraining_dataset import OBJECTIVES, pretraining_dataset, read_documents
from kbert.pretraining.sentence_pairs import full_sentences, nsp_pairs, sop_pairs, structbert_pairs
from kbert.pretraining.span_bert_pretrainer import SpanBertPretrainer
from kbert.pretraining.span_corruption import SpanCorruption, span_corruption_lengths
from kbert.pretraining.span_masker import SpanMasker
from kbert.pretraining.struct_bert_pretrainer import StructBertPretrainer
from kbert.pretraining.t5_objective import T5_OBJECTIVES, T5Objective
from kbert.pretraining.trigram_shuffler import TrigramShuffler
from kbert.training.warmup_linear_decay import WarmupLinearDecay
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer

__all__ = [
    "OBJECTIVES",
    "AdamW",
    "BartDenoising",
    "BertPretrainer",
    "BiLMPretrainer",
    "DistillationTrainer",
    "ElectraPretrainer",
    "MaskedLMMasker",
    "Masker",
    "PermutationMasker",
    "SpanBertPretrainer",
    "SpanCorruption",
    "SpanMasker",
    "StructBertPretrainer",
    "T5_OBJECTIVES",
    "T5Objective",
    "TrigramShuffler",
    "WarmupLinearDecay",
    "XLNetPretrainer",
    "bart_examples",
    "bilm_dataset",
    "create_optimizer",
    "full_sentences",
    "init_student_from_teacher",
    "learn_word_vocabulary",
    "nsp_pairs",
    "pretraining_dataset",
    "read_documents",
    "sop_pairs",
    "structbert_pairs",
    "span_corruption_lengths",
]

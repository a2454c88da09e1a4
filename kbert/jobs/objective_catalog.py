"""The objectives of `kbert pretrain`, one `PretrainingObjective` record each.

`OBJECTIVES[name]` holds, for `mlm_nsp` (BERT), `mlm` (RoBERTa), `sop`
(ALBERT), `span` (SpanBERT), `electra`, `structbert`, `plm` (XLNet), `clm`
(GPT-2), `bilm` (ELMo), `bart`, and T5's `span_corruption`, `prefix_lm`,
`bert_style`, `deshuffle`, `mass` and `drop_tokens`: the models it trains, its vocabulary kind, how its model and
pretrainer are built for a short run, its data and its report. The data and
reports live in `language_model_objectives`, `bilm_objective`,
`bart_objective` and `t5_objectives`; an objective more is one record more here.

>>> OBJECTIVES["clm"].default_model, OBJECTIVES["bart"].outputs[:2]
('gpt2_tiny', ('vocab.json', 'merges.txt'))
"""

import functools

from kbert.jobs.bart_objective import BART_DENOISING, bart_data
from kbert.jobs.bilm_objective import BILM, bilm_data
from kbert.jobs.language_model_objectives import MASKED_LM, NEXT_TOKEN, PERMUTATION_LM, token_data
from kbert.jobs.pretraining_objective import TRAINS_ALONE, PretrainingObjective
from kbert.jobs.t5_objectives import T5_REPORT, t5_data
from kbert.jobs.vocabulary_kind import BYTE_LEVEL_BPE, SENTENCE_PIECE, WORD_PIECE, WORDS
from kbert.models.presets import BART_PRESETS, ELMO_PRESETS, GPT2_PRESETS, PRESETS, T5_PRESETS, XLNET_PRESETS, build
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.pretraining.bilm_pretrainer import BiLMPretrainer
from kbert.pretraining.electra_pretrainer import ElectraPretrainer
from kbert.pretraining.span_bert_pretrainer import SpanBertPretrainer
from kbert.pretraining.struct_bert_pretrainer import StructBertPretrainer
from kbert.pretraining.t5_objective import T5_OBJECTIVES
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer
from kbert.tasks.causal_lm import CausalLM
from kbert.tasks.seq2seq_lm import Seq2SeqLM

# A run of minutes on a CPU is far from overfitting, and what limits it is how
# fast the loss falls: dropout only slows that (Geiping & Goldstein 2022,
# "Cramming"), and pre-LN blocks take a higher peak learning rate than BERT's
# post-LN ones. On the default job (bert_tiny, 32 x 64, JAX) they reach 0.20
# training masked-LM accuracy at step 1800 (peak 2e-3) where BERT's dropout and
# post-LN reach 0.18 (peak 1e-3; 3e-3 stalled), and 0.26 held-out at step 4800.
SHORT_RUN_OVERRIDES = {"dropout": 0.0, "normalize_first": True}


def _encoder(use_pooler, name, tokenizer):
    """The encoder `name` for a short run; a pooler only where the objective reads it (else it gets no gradient)."""
    return build(name, vocabulary_size=tokenizer.vocabulary_size, use_pooler=use_pooler, **SHORT_RUN_OVERRIDES)


def _without_dropout(name, tokenizer, **options):
    """GPT-2 or BART (pre-LN already) without dropout, sized to `tokenizer`."""
    return build(name, vocabulary_size=tokenizer.vocabulary_size, dropout=SHORT_RUN_OVERRIDES["dropout"],
                 **options)


def _xlnet(name, tokenizer):
    """An XLNet without dropout, sized to `tokenizer` (its positions are relative: any packing serves)."""
    return _without_dropout(name, tokenizer)


def _decoder(name, tokenizer):
    """A GPT-2 whose generated text ends at `[SEP]`, as each document's text does."""
    return _without_dropout(name, tokenizer, end_id=tokenizer.sep_id)


def _elmo(name, words):
    """An ELMo without dropout (its softmax, sized to the words, is the pretrainer's)."""
    return build(name, dropout=SHORT_RUN_OVERRIDES["dropout"])


def _bert(pair_objective, backbone, tokenizer):
    return BertPretrainer(backbone, pair_objective=pair_objective)


def _electra(backbone, tokenizer):
    """ELECTRA with a generator a quarter of the discriminator's width (ELECTRA-Small)."""
    hidden = max(backbone.hidden_dim // 4, 64)
    return ElectraPretrainer(
        backbone,
        generator_num_layers=backbone.num_layers,
        generator_hidden_dim=hidden,
        generator_num_heads=max(hidden // 64, 1),
        generator_intermediate_dim=4 * hidden,
    )


def _masked_lm(objective, pretrainer, use_pooler=False):
    """An encoder objective of `pretraining_dataset`, reported as masked LM."""
    return PretrainingObjective(
        models=PRESETS, default_model="bert_tiny", model_kind="the encoders", refusal=None,
        vocabulary=WORD_PIECE, model=functools.partial(_encoder, use_pooler), pretrainer=pretrainer,
        data=functools.partial(token_data, objective), report=MASKED_LM)


def _t5(objective):
    """One of T5's objectives (`kbert.pretraining.T5Objective`); the T5 presets train with each of them."""
    return PretrainingObjective(
        models=T5_PRESETS, default_model="t5_tiny", model_kind="the T5 models", refusal=None,
        vocabulary=SENTENCE_PIECE, model=_without_dropout, pretrainer=lambda backbone, tokenizer: Seq2SeqLM(backbone),
        data=functools.partial(t5_data, objective), report=T5_REPORT)


OBJECTIVES = {
    "mlm_nsp": _masked_lm("mlm_nsp", functools.partial(_bert, "nsp"), use_pooler=True),
    "mlm": _masked_lm("mlm", functools.partial(_bert, None)),
    "sop": _masked_lm("sop", functools.partial(_bert, "sop"), use_pooler=True),
    "span": _masked_lm("span", lambda backbone, tokenizer: SpanBertPretrainer(backbone)),
    "electra": _masked_lm("electra", _electra),
    "structbert": _masked_lm(
        "structbert", lambda backbone, tokenizer: StructBertPretrainer(backbone), use_pooler=True
    ),
    "plm": PretrainingObjective(
        models=XLNET_PRESETS, default_model="xlnet_tiny", model_kind="the XLNet models", refusal=TRAINS_ALONE,
        vocabulary=WORD_PIECE, model=_xlnet, pretrainer=lambda backbone, tokenizer: XLNetPretrainer(backbone),
        data=functools.partial(token_data, "plm"), report=PERMUTATION_LM),
    "clm": PretrainingObjective(
        models=GPT2_PRESETS, default_model="gpt2_tiny", model_kind="the decoders", refusal=TRAINS_ALONE,
        vocabulary=WORD_PIECE, model=_decoder, pretrainer=lambda backbone, tokenizer: CausalLM(backbone),
        data=functools.partial(token_data, "clm"), report=NEXT_TOKEN),
    "bilm": PretrainingObjective(
        models=ELMO_PRESETS, default_model="elmo_small", model_kind="the ELMo models", refusal=TRAINS_ALONE,
        vocabulary=WORDS, model=_elmo,
        pretrainer=lambda backbone, words: BiLMPretrainer(backbone, vocabulary_size=len(words)),
        data=bilm_data, report=BILM),
    "bart": PretrainingObjective(
        models=BART_PRESETS, default_model="bart_tiny", model_kind="the BART models",
        refusal="The bart objective pretrains a BART; {model} is not one (choose one of {models}).",
        vocabulary=BYTE_LEVEL_BPE, model=_without_dropout,
        pretrainer=lambda backbone, tokenizer: Seq2SeqLM(backbone), data=bart_data, report=BART_DENOISING),
    # Span corruption first: the T5 models are refused for the other objectives in its words.
    **{objective: _t5(objective) for objective in sorted(T5_OBJECTIVES, key=lambda o: o != "span_corruption")},
}
"""The objectives of `kbert pretrain`, by name."""

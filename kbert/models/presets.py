"""The named model sizes and the builder functions users call.

Every builder returns a randomly initialised model and takes keyword
overrides of any of its constructor's arguments: `bert_base(num_layers=6,
dropout=0.0)` builds an `Encoder`, `t5_small(num_layers=2)` a `T5`.
`build("bert_base", ...)` reads the same tables, `PRESETS` (the encoders),
`T5_PRESETS`, `BART_PRESETS`, `GPT2_PRESETS`, `XLNET_PRESETS` and `ELMO_PRESETS`. Parameter counts are those of
the published models (with the pooler where the published model has one; T5's
from the reference library's configs, docs/algorithms.md §19) and are tested.
"""

import difflib

from kbert.arguments import no_unknown_keywords
from kbert.layers.character_cnn import ELMO_FILTERS
from kbert.models.bart import BART
from kbert.models.elmo import ELMo
from kbert.models.encoder import Encoder
from kbert.models.gpt2 import GPT2
from kbert.models.t5 import T5
from kbert.models.xlnet import XLNet
from kbert.serialization import constructor_arguments

_BERT = dict(vocabulary_size=30522, max_positions=512, num_segments=2)
_ROBERTA = dict(
    vocabulary_size=50265,
    max_positions=514,
    num_segments=1,
    position_offset=2,
    layer_norm_epsilon=1e-5,
)
# ALBERT v2: factorized embedding E=128, one shared block, tanh GELU, no dropout.
_ALBERT = dict(
    vocabulary_size=30000,
    max_positions=512,
    num_segments=2,
    embedding_dim=128,
    share_layers=True,
    activation="gelu_approximate",
    dropout=0.0,
)
_ELECTRA = dict(vocabulary_size=30522, max_positions=512, num_segments=2, use_pooler=False)
# Long-document models (docs/algorithms.md §12, §13): BigBird-RoBERTa (BERT-style
# positions from 0, tanh GELU) and Longformer (RoBERTa, 4096 + 2 positions).
_BIGBIRD = dict(
    vocabulary_size=50358,
    max_positions=4096,
    num_segments=2,
    activation="gelu_approximate",
    attention="bigbird",
    attention_kwargs={"block_size": 64, "num_random_blocks": 3},
)
_LONGFORMER = dict(
    _ROBERTA,
    max_positions=4098,
    attention="longformer",
    attention_kwargs={"window": 256},
)
# T5: V = 32128 (32000 SentencePiece pieces + 100 sentinels, padded); d_kv = 64.
_T5_V1_0 = dict(vocabulary_size=32128, key_dim=64, activation="relu", tie_embeddings=True)
_T5_V1_1 = dict(
    vocabulary_size=32128,
    key_dim=64,
    activation="gelu_approximate",
    use_gated_activation=True,
    tie_embeddings=False,
)


def _size(layers, hidden, heads, intermediate=None):
    return dict(
        num_layers=layers,
        hidden_dim=hidden,
        num_heads=heads,
        intermediate_dim=intermediate or 4 * hidden,
    )


PRESETS = {
    # Turc et al. 2019, "Well-Read Students Learn Better" compact BERTs.
    "bert_tiny": {**_BERT, **_size(2, 128, 2)},
    "bert_mini": {**_BERT, **_size(4, 256, 4)},
    "bert_small": {**_BERT, **_size(4, 512, 8)},
    "bert_medium": {**_BERT, **_size(8, 512, 8)},
    "bert_base": {**_BERT, **_size(12, 768, 12)},
    "bert_large": {**_BERT, **_size(24, 1024, 16)},
    "roberta_base": {**_ROBERTA, **_size(12, 768, 12)},
    "roberta_large": {**_ROBERTA, **_size(24, 1024, 16)},
    "albert_base": {**_ALBERT, **_size(12, 768, 12)},
    "albert_large": {**_ALBERT, **_size(24, 1024, 16)},
    "albert_xlarge": {**_ALBERT, **_size(24, 2048, 16)},
    "albert_xxlarge": {**_ALBERT, **_size(12, 4096, 64)},
    "electra_small": {**_ELECTRA, **_size(12, 256, 4), "embedding_dim": 128},
    "electra_base": {**_ELECTRA, **_size(12, 768, 12)},
    "electra_large": {**_ELECTRA, **_size(24, 1024, 16)},
    # The released ELECTRA generators (they share the discriminator's embeddings).
    "electra_small_generator": {**_ELECTRA, **_size(12, 256, 4), "embedding_dim": 128},
    "electra_base_generator": {**_ELECTRA, **_size(12, 256, 4), "embedding_dim": 768},
    "electra_large_generator": {**_ELECTRA, **_size(24, 256, 4), "embedding_dim": 1024},
    "distilbert_base": {
        **_BERT,
        **_size(6, 768, 12),
        "num_segments": 0,
        "use_pooler": False,
    },
    "bigbird_base": {**_BIGBIRD, **_size(12, 768, 12)},
    "longformer_base": {**_LONGFORMER, **_size(12, 768, 12)},
}

T5_PRESETS = {
    # No released model: T5 v1.0 blocks at BERT-Tiny's size (key width 64), for short runs and tests.
    "t5_tiny": {**_T5_V1_0, **_size(2, 128, 2, 512)},
    "t5_small": {**_T5_V1_0, **_size(6, 512, 8, 2048)},
    "t5_base": {**_T5_V1_0, **_size(12, 768, 12, 3072)},
    "t5_large": {**_T5_V1_0, **_size(24, 1024, 16, 4096)},
    "t5_v1_1_small": {**_T5_V1_1, **_size(8, 512, 6, 1024)},
    "t5_v1_1_base": {**_T5_V1_1, **_size(12, 768, 12, 2048)},
}

# GPT-2: V = 50257 byte-level BPE tokens, 1024 positions, tied head, I = 4H.
_GPT2 = dict(vocabulary_size=50257, max_positions=1024)
GPT2_PRESETS = {
    # No released model: GPT-2 blocks at BERT-Tiny's size, for short runs and tests.
    "gpt2_tiny": {**_GPT2, **_size(2, 128, 2)},
    "gpt2_base": {**_GPT2, **_size(12, 768, 12)},
    "gpt2_medium": {**_GPT2, **_size(24, 1024, 16)},
    "gpt2_large": {**_GPT2, **_size(36, 1280, 20)},
}

# XLNet: V = 32000 SentencePiece pieces, no position table (relative positions), I = 4H.
_XLNET = dict(vocabulary_size=32000)
XLNET_PRESETS = {
    # No released model: XLNet blocks at BERT-Tiny's size, for short runs and tests.
    "xlnet_tiny": {**_XLNET, **_size(2, 128, 2)},
    "xlnet_base": {**_XLNET, **_size(12, 768, 12)},
    "xlnet_large": {**_XLNET, **_size(24, 1024, 16)},
}

# ELMo (AllenNLP's elmo_2x4096_512_2048cnn_2xhighway "original" options) and a
# small biLM for CPU runs: a quarter of the width, the first five filter banks.
ELMO_PRESETS = {
    "elmo_original": dict(hidden_dim=512, cell_dim=4096, num_layers=2, filters=ELMO_FILTERS),
    "elmo_small": dict(hidden_dim=128, cell_dim=512, num_layers=2, filters=ELMO_FILTERS[:5]),
}

# BART (docs/algorithms.md §10): RoBERTa's 50265-token vocabulary, 1024 (+2) positions.
_BART = dict(vocabulary_size=50265, max_positions=1024)
BART_PRESETS = {
    # kbert's size for short runs (`kbert pretrain --objective bart`), BERT-Tiny's shape.
    "bart_tiny": {**_BART, **_size(2, 128, 2)},
    "bart_base": {**_BART, **_size(6, 768, 12)},
    "bart_large": {**_BART, **_size(12, 1024, 16)},
}

# The model class each table builds.
_TABLES = (
    (Encoder, PRESETS),
    (T5, T5_PRESETS),
    (BART, BART_PRESETS),
    (GPT2, GPT2_PRESETS),
    (XLNet, XLNET_PRESETS),
    (ELMo, ELMO_PRESETS),
)


def preset_class(name):
    """The model class `build(name)` returns; `None` for a name that is no preset.

    >>> preset_class("gpt2_tiny").__name__, preset_class("no_such_model")
    ('GPT2', None)
    """
    return next((model_class for model_class, table in _TABLES if name in table), None)


def build(name, **overrides):
    """Build the named preset, with keyword overrides of its model's constructor arguments.

    An `Encoder` for the names in `PRESETS`, a `T5` for those in `T5_PRESETS`,
    a `BART` for those in `BART_PRESETS`, a `GPT2` for those in `GPT2_PRESETS`, an `XLNet` for those in `XLNET_PRESETS`,
    an `ELMo` for those in `ELMO_PRESETS`.

    >>> build("bert_tiny", num_layers=1).num_layers
    1
    >>> type(build("t5_small", num_layers=1, vocabulary_size=100)).__name__
    'T5'
    """
    for model_class, table in _TABLES:
        if name in table:
            _check_overrides(name, model_class, overrides)
            return model_class(**{**table[name], "name": name, **overrides})
    known = [known_name for _, table in _TABLES for known_name in table]
    close = difflib.get_close_matches(str(name), known, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"Unknown model '{name}'.{hint} Known models: {', '.join(sorted(known))}.")


def _check_overrides(name, model_class, overrides):
    """Raise a `TypeError` naming the overrides that are no argument of `model_class`."""
    known = [*constructor_arguments(model_class), "name"]
    no_unknown_keywords(f"{name} ({model_class.__name__})", overrides, known)


def bert_tiny(**overrides):
    """BERT-Tiny (L2 H128 A2): 4,385,920 parameters."""
    return build("bert_tiny", **overrides)


def bert_mini(**overrides):
    """BERT-Mini (L4 H256 A4): 11,170,560 parameters."""
    return build("bert_mini", **overrides)


def bert_small(**overrides):
    """BERT-Small (L4 H512 A8): 28,763,648 parameters."""
    return build("bert_small", **overrides)


def bert_medium(**overrides):
    """BERT-Medium (L8 H512 A8): 41,373,184 parameters."""
    return build("bert_medium", **overrides)


def bert_base(**overrides):
    """BERT-Base (L12 H768 A12): 109,482,240 parameters.

    >>> bert_base().count_params()
    109482240
    """
    return build("bert_base", **overrides)


def bert_large(**overrides):
    """BERT-Large (L24 H1024 A16): 335,141,888 parameters."""
    return build("bert_large", **overrides)


def roberta_base(**overrides):
    """RoBERTa-Base (L12 H768, V 50265, 514 positions): 124,645,632 parameters."""
    return build("roberta_base", **overrides)


def roberta_large(**overrides):
    """RoBERTa-Large (L24 H1024): 355,359,744 parameters."""
    return build("roberta_large", **overrides)


def albert_base(**overrides):
    """ALBERT-Base v2 (L12 H768 E128, shared layers): 11,683,584 parameters."""
    return build("albert_base", **overrides)


def albert_large(**overrides):
    """ALBERT-Large v2 (L24 H1024 E128, shared layers): 17,683,968 parameters."""
    return build("albert_large", **overrides)


def albert_xlarge(**overrides):
    """ALBERT-XLarge v2 (L24 H2048 A16 E128, shared layers): 58,724,864 parameters."""
    return build("albert_xlarge", **overrides)


def albert_xxlarge(**overrides):
    """ALBERT-XXLarge v2 (L12 H4096 A64 I16384 E128, shared): 222,595,584 parameters."""
    return build("albert_xxlarge", **overrides)


def electra_small(**overrides):
    """ELECTRA-Small discriminator (L12 H256 A4 E128): 13,483,008 parameters."""
    return build("electra_small", **overrides)


def electra_base(**overrides):
    """ELECTRA-Base discriminator (L12 H768): 108,891,648 parameters."""
    return build("electra_base", **overrides)


def electra_large(**overrides):
    """ELECTRA-Large discriminator (L24 H1024): 334,092,288 parameters."""
    return build("electra_large", **overrides)


def electra_small_generator(**overrides):
    """ELECTRA-Small generator as released (L12 H256 A4 E128): 13,483,008 parameters."""
    return build("electra_small_generator", **overrides)


def electra_base_generator(**overrides):
    """ELECTRA-Base generator (L12 H256 A4 E768): 33,511,168 parameters."""
    return build("electra_base_generator", **overrides)


def electra_large_generator(**overrides):
    """ELECTRA-Large generator (L24 H256 A4 E1024): 50,999,552 parameters."""
    return build("electra_large_generator", **overrides)


def distilbert_base(**overrides):
    """DistilBERT-Base (L6 H768, no segments, no pooler): 66,362,880 parameters."""
    return build("distilbert_base", **overrides)


def bigbird_base(**overrides):
    """BigBird-RoBERTa-Base (L12 H768, V 50358, 4096 positions, block-sparse).

    127,468,800 parameters.
    """
    return build("bigbird_base", **overrides)


def longformer_base(**overrides):
    """Longformer-Base (L12 H768, V 50265, 4098 positions, window 2·256, global q/k/v).

    148,659,456 parameters.
    """
    return build("longformer_base", **overrides)


def t5_tiny(**overrides):
    """T5 v1.0 blocks at BERT-Tiny's size (L2 H128 A2 I512, V 32128), no released model: 5,031,552 parameters."""
    return build("t5_tiny", **overrides)


def t5_small(**overrides):
    """T5-Small v1.0 (6+6 layers, d 512, 8 heads, ReLU, tied): 60,506,624 parameters."""
    return build("t5_small", **overrides)


def t5_base(**overrides):
    """T5-Base v1.0 (12+12 layers, d 768, 12 heads, ReLU, tied): 222,903,552 parameters."""
    return build("t5_base", **overrides)


def t5_large(**overrides):
    """T5-Large v1.0 (24+24 layers, d 1024, 16 heads, ReLU, tied): 737,668,096 parameters."""
    return build("t5_large", **overrides)


def t5_v1_1_small(**overrides):
    """T5 v1.1-Small (8+8 layers, d 512, 6 heads, gated GELU, untied): 76,961,152 parameters."""
    return build("t5_v1_1_small", **overrides)


def t5_v1_1_base(**overrides):
    """T5 v1.1-Base (12+12 layers, d 768, 12 heads, gated GELU, untied): 247,577,856 parameters."""
    return build("t5_v1_1_base", **overrides)


def gpt2_tiny(**overrides):
    """GPT-2 blocks at BERT-Tiny's size (L2 H128 A2, V 50257; no released model): 6,960,768 parameters."""
    return build("gpt2_tiny", **overrides)


def gpt2_base(**overrides):
    """GPT-2 small (L12 H768 A12, tied head): 124,439,808 parameters."""
    return build("gpt2_base", **overrides)


def gpt2_medium(**overrides):
    """GPT-2 medium (L24 H1024 A16, tied head): 354,823,168 parameters."""
    return build("gpt2_medium", **overrides)


def gpt2_large(**overrides):
    """GPT-2 large (L36 H1280 A20, tied head): 774,030,080 parameters."""
    return build("gpt2_large", **overrides)


def elmo_original(**overrides):
    """ELMo "original" (2 x 4096 cells projected to 512, 2048 char-CNN features, 2 highway).

    93,600,864 parameters: AllenNLP's 93.6M, softmax excluded.
    """
    return build("elmo_original", **overrides)


def elmo_small(**overrides):
    """A small ELMo for CPU runs (2 x 512 cells projected to 128, 512 char-CNN features).

    3,521,760 parameters.
    """
    return build("elmo_small", **overrides)


def bart_tiny(**overrides):
    """A tiny BART of kbert's own (2+2 layers, d 128, 2 heads): 7,673,049 parameters.

    No published model has this size: it is for short runs on a CPU.
    """
    return build("bart_tiny", **overrides)


def bart_base(**overrides):
    """BART-Base (6+6 layers, d 768, 12 heads, tied): 139,420,416 parameters + 50,265.

    The 50,265 are `final_logits_bias`, a buffer in transformers and the
    trainable bias of `lm_head` here: `count_params()` is 139,470,681.
    """
    return build("bart_base", **overrides)


def bart_large(**overrides):
    """BART-Large (12+12 layers, d 1024, 16 heads, tied): 406,291,456 parameters + 50,265.

    The 50,265 are `final_logits_bias` (see `bart_base`): `count_params()` is 406,341,721.
    """
    return build("bart_large", **overrides)


def xlnet_tiny(**overrides):
    """XLNet at BERT-Tiny's size (L2 H128 A2), for short runs and tests: 4,525,696 parameters."""
    return build("xlnet_tiny", **overrides)


def xlnet_base(**overrides):
    """XLNet-Base (L12 H768 A12): 116,718,336 parameters, as transformers' XLNetModel."""
    return build("xlnet_base", **overrides)


def xlnet_large(**overrides):
    """XLNet-Large (L24 H1024 A16): 360,268,800 parameters, as transformers' XLNetModel."""
    return build("xlnet_large", **overrides)

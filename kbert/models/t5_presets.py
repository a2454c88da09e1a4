"""The named T5 sizes and their builder functions.

Every builder returns a randomly initialised `T5` and takes keyword overrides
of any `T5` argument: `t5_small(num_layers=2, dropout=0.0)`.
`build_t5("t5_small", ...)` reads the same table. Parameter counts are those
of the reference library's configs (ALGORITHMS.md §8) and are tested.
"""

import difflib

from kbert.models.t5 import T5

# V = 32128 (32000 SentencePiece pieces + 100 sentinels, padded); d_kv = 64.
_V1_0 = dict(vocabulary_size=32128, key_dim=64, activation="relu", tie_embeddings=True)
_V1_1 = dict(
    vocabulary_size=32128,
    key_dim=64,
    activation="gelu_approximate",
    use_gated_activation=True,
    tie_embeddings=False,
)


def _size(layers, hidden, heads, intermediate):
    return dict(
        num_layers=layers, hidden_dim=hidden, num_heads=heads, intermediate_dim=intermediate
    )


T5_PRESETS = {
    "t5_small": {**_V1_0, **_size(6, 512, 8, 2048)},
    "t5_base": {**_V1_0, **_size(12, 768, 12, 3072)},
    "t5_large": {**_V1_0, **_size(24, 1024, 16, 4096)},
    "t5_v1_1_small": {**_V1_1, **_size(8, 512, 6, 1024)},
    "t5_v1_1_base": {**_V1_1, **_size(12, 768, 12, 2048)},
}


def build_t5(name, **overrides):
    """Build the named T5 preset, with keyword overrides of `T5` arguments.

    >>> build_t5("t5_small", num_layers=1, vocabulary_size=100).num_layers
    1
    """
    if name not in T5_PRESETS:
        close = difflib.get_close_matches(str(name), T5_PRESETS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown T5 model '{name}'.{hint} Known: {', '.join(sorted(T5_PRESETS))}."
        )
    unknown = set(overrides) - set(T5.__init__.__code__.co_varnames) - {"name"}
    if unknown:
        raise TypeError(f"Unknown argument(s) for {name}: {', '.join(sorted(unknown))}.")
    config = {**T5_PRESETS[name], **overrides}
    config.setdefault("name", name)
    return T5(**config)


def t5_small(**overrides):
    """T5-Small v1.0 (6+6 layers, d 512, 8 heads, ReLU, tied): 60,506,624 parameters."""
    return build_t5("t5_small", **overrides)


def t5_base(**overrides):
    """T5-Base v1.0 (12+12 layers, d 768, 12 heads, ReLU, tied): 222,903,552 parameters."""
    return build_t5("t5_base", **overrides)


def t5_large(**overrides):
    """T5-Large v1.0 (24+24 layers, d 1024, 16 heads, ReLU, tied): 737,668,096 parameters."""
    return build_t5("t5_large", **overrides)


def t5_v1_1_small(**overrides):
    """T5 v1.1-Small (8+8 layers, d 512, 6 heads, gated GELU, untied): 76,961,152 parameters."""
    return build_t5("t5_v1_1_small", **overrides)


def t5_v1_1_base(**overrides):
    """T5 v1.1-Base (12+12 layers, d 768, 12 heads, gated GELU, untied): 247,577,856 parameters."""
    return build_t5("t5_v1_1_base", **overrides)

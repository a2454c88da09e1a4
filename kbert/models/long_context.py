"""Turn a short-context encoder into a long one: the Longformer recipe."""

import numpy as np

from kbert.arguments import positive_int
from kbert.models.encoder import Encoder

# Longformer's global projections start from the local ones (by Keras name).
_GLOBAL_PROJECTIONS = {
    f"{name}_global_dense": f"{name}_dense" for name in ("query", "key", "value")
}


def to_long_context(
    encoder, max_length=4096, attention="longformer", attention_kwargs=None, **overrides
):
    """A long-context copy of a BERT/RoBERTa-style `Encoder`, with its weights.

    Follows the Longformer recipe (docs/algorithms.md §13, `convert_model_to_long`):
    the position table grows to `max_length` real positions (plus the
    `position_offset` rows RoBERTa reserves), filled by tiling the original
    table's real-position rows (RoBERTa: rows 2..513 repeated from row 2); the
    attention becomes sparse; every other weight is copied. Longformer's
    global projections start as copies of the local query / key / value.
    Continued masked-LM training on long documents is what makes the result
    good; the copy is only its starting point.

    Args:
        encoder: a built `kbert.models.Encoder` (e.g. `roberta_base()` or one
            from `from_huggingface`).
        max_length: real positions of the new table; a multiple of the
            original length is what the recipe uses, any length works.
        attention: `"longformer"` or `"bigbird"` (any name in `ATTENTION_LAYERS`).
        attention_kwargs: arguments of the new attention layer, e.g.
            `{"window": 256}` or `{"block_size": 64, "num_random_blocks": 3}`.
        **overrides: other `Encoder` arguments to change.

    Returns:
        A new `Encoder` with `max_positions = max_length + position_offset`.

    Example:
    >>> from kbert.models import build
    >>> short = build("roberta_base", num_layers=1, hidden_dim=8, num_heads=2,
    ...               intermediate_dim=16, vocabulary_size=20, max_positions=10)
    >>> long = to_long_context(short, max_length=32, attention_kwargs={"window": 4})
    >>> long.max_positions, long.attention
    (34, 'longformer')
    """
    config = encoder.get_config()
    offset = config["position_offset"]
    max_length = positive_int("max_length", max_length)
    config.update(
        max_positions=int(max_length) + offset,
        attention=attention,
        attention_kwargs=dict(attention_kwargs or {}),
        name=f"{encoder.name}_long",
        **overrides,
    )
    config.pop("trainable", None)
    long_encoder = Encoder.from_config(config)

    source = {variable.path: variable for variable in encoder.weights}
    position_path = encoder.embeddings.position_embedding.embeddings.path
    for variable in long_encoder.weights:
        if variable.path == position_path:
            table = np.asarray(_numpy(source[position_path]))
            variable.assign(_tile_positions(table, int(max_length) + offset, offset))
            continue
        path = variable.path
        head, _, leaf = path.rpartition("/")
        parent, _, name = head.rpartition("/")
        if name in _GLOBAL_PROJECTIONS and path not in source:
            path = f"{parent}/{_GLOBAL_PROJECTIONS[name]}/{leaf}"
        if path not in source or tuple(source[path].shape) != tuple(variable.shape):
            raise ValueError(
                f"No weight of the short encoder fits {variable.path} "
                f"(shape {tuple(variable.shape)}); was the encoder built with other sizes?"
            )
        variable.assign(_numpy(source[path]))
    return long_encoder


def _numpy(variable):
    from keras import ops

    return ops.convert_to_numpy(ops.cast(variable, "float32"))


def _tile_positions(table, rows, offset):
    """`rows` position rows: the first `offset` kept, the rest tiled from `table[offset:]`."""
    real = table[offset:]
    repeats = -(-(rows - offset) // len(real))
    tiled = np.concatenate([table[:offset], np.tile(real, (repeats, 1))], axis=0)
    return tiled[:rows]

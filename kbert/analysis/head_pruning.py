"""Removing attention heads from an encoder: fewer parameters, the outputs of the head-masked model."""

import keras
import numpy as np

from kbert.analysis.wrapped_encoder import wrapped_encoder
from kbert.models.encoder import Encoder


def prune_heads(model, heads_to_prune):
    """A copy of `model` without the attention heads `heads_to_prune`, `{layer: [heads]}`.

    Each pruned head's columns of the query, key and value projections (and
    of Longformer's global ones) and their biases, and its rows of the output
    projection are cut out, as transformers' `prune_heads` does for BERT:
    `4·H·d + 3·d` parameters fewer per head (hidden width H, head width d;
    Longformer `7·H·d + 6·d`). The copy gives the outputs of `model` with
    those heads masked to 0 (`head_mask`); BigBird heads keep their random
    blocks. Layers may end with different head counts (at least one each):
    the copy's config holds them (`Encoder`'s `heads_per_layer`), so it
    saves and loads like any model. Heads are numbered as the layer has them
    now; `model` is left as it is.

    Args:
        model: a kbert `Encoder`, or a task or pretrainer wrapping one as
            `backbone` (rebuilt from its config around the pruned encoder).
        heads_to_prune: `{layer index: [head indices]}`.

    Returns:
        The pruned copy, of `model`'s class.

    Example:
    >>> encoder = kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=4,
    ...                                hidden_dim=8, intermediate_dim=16, max_positions=8)
    >>> pruned = prune_heads(encoder, {0: [1, 2, 3], 1: [0]})
    >>> pruned.heads_per_layer, encoder.count_params() - pruned.count_params()  # 4·(4·8·2 + 3·2)
    ([1, 3], 280)
    """
    encoder = wrapped_encoder(model, "prune_heads")
    kept = _kept_heads(encoder, heads_to_prune)
    pruned_encoder = Encoder.from_config(_pruned_config(encoder, kept))
    if model is encoder:
        copy = pruned_encoder
    else:
        copy = type(model).from_config({**model.get_config(), "backbone": pruned_encoder})
    values = _pruned_values(encoder, kept)
    if len(copy.weights) != len(model.weights):
        raise ValueError(f"The pruned {type(model).__name__} does not have the model's weights.")
    for old, new in zip(model.weights, copy.weights):
        value = values.get(id(old))
        new.assign(keras.ops.convert_to_numpy(old) if value is None else value)
    return copy


def _kept_heads(encoder, heads_to_prune):
    """The heads each layer keeps, a list of index lists (the arguments checked)."""
    counts = encoder.layer_num_heads
    if encoder.share_layers and heads_to_prune:
        raise ValueError("prune_heads cannot prune an encoder with shared layers (ALBERT).")
    kept = [list(range(count)) for count in counts]
    for layer, heads in heads_to_prune.items():
        if not 0 <= layer < len(counts):
            raise ValueError(f"prune_heads: no layer {layer}; the encoder has {len(counts)}.")
        heads = set(heads)
        if not heads <= set(range(counts[layer])):
            raise ValueError(
                f"prune_heads: layer {layer} has heads 0..{counts[layer] - 1}; "
                f"received {sorted(heads)}."
            )
        kept[layer] = [head for head in kept[layer] if head not in heads]
        if not kept[layer]:
            raise ValueError(f"prune_heads would remove every head of layer {layer}; keep one.")
    return kept


def _pruned_config(encoder, kept):
    """The encoder's config with each layer's kept heads: `heads_per_layer`, `attention_kwargs`."""
    config = encoder.get_config()
    arguments = []
    for block, heads in zip(encoder.transformer_layers, kept):
        layer_arguments = block.attention_layer.arguments_keeping_heads(heads)
        layer_arguments.pop("num_heads")
        layer_kwargs = encoder.attention_kwargs
        if isinstance(layer_kwargs, list):
            layer_kwargs = layer_kwargs[len(arguments)]
        arguments.append({**layer_kwargs, **layer_arguments})
    config["heads_per_layer"] = [len(heads) for heads in kept]
    config["attention_kwargs"] = arguments
    return config


def _pruned_values(encoder, kept):
    """`{id(variable): NumPy value}` for every projection weight that loses heads."""
    values = {}
    for block, heads in zip(encoder.transformer_layers, kept):
        attention = block.attention_layer
        if len(heads) == attention.num_heads:
            continue
        for dense, width in attention.head_projections():
            columns = _head_slices(heads, width)
            values[id(dense.kernel)] = keras.ops.convert_to_numpy(dense.kernel)[:, columns]
            if dense.use_bias:
                values[id(dense.bias)] = keras.ops.convert_to_numpy(dense.bias)[columns]
        output = attention.output_dense.kernel
        values[id(output)] = keras.ops.convert_to_numpy(output)[_head_slices(heads, attention.value_dim)]
    return values


def _head_slices(heads, width):
    """The indices of `heads`' features in a `(heads·width)` axis, in order."""
    return np.concatenate([np.arange(head * width, (head + 1) * width) for head in heads])


def least_important_heads(scores, count):
    """`{layer: [heads]}`: the `count` heads of lowest score, each layer keeping one at least.

    The order Michel et al. prune in, for `prune_heads`; `scores` are
    `head_importance`'s, `(num_layers, num_heads)` or a list of one array per layer.

    >>> least_important_heads(np.array([[0.1, 0.9, 0.2], [0.05, 0.99, 0.3]]), 3)
    {0: [0, 2], 1: [0]}
    >>> least_important_heads([np.array([0.5]), np.array([0.2, 0.1])], 1)
    {1: [1]}
    """
    remaining = [len(layer_scores) for layer_scores in scores]
    if count > sum(remaining) - len(remaining):
        raise ValueError(
            f"Cannot prune {count} heads: {sum(remaining)} heads in {len(remaining)} layers "
            "leave at most one fewer per layer to prune."
        )
    order = sorted(
        (float(score), layer, head)
        for layer, layer_scores in enumerate(scores)
        for head, score in enumerate(layer_scores)
    )
    chosen, pruned = {}, 0
    for _, layer, head in order:
        if pruned == count:
            break
        if remaining[layer] > 1:
            chosen.setdefault(layer, []).append(head)
            remaining[layer] -= 1
            pruned += 1
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}

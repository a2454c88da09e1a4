"""Removing attention heads from an encoder or T5: fewer parameters, the outputs of the head-masked model."""

import keras

from kbert.analysis.pruned_attention import kept_heads, pruned_attention_values
from kbert.analysis.t5_head_pruning import t5_pruning
from kbert.models.encoder import Encoder
from kbert.models.t5 import T5


def prune_heads(model, heads_to_prune):
    """A copy of `model` without the attention heads `heads_to_prune`.

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

    An encoder `heads_to_prune` is `{layer: [heads]}`. ALBERT's layers share
    one block, and, as in transformers' `AlbertModel.prune_heads`, its
    layers are numbered as the distinct shared layers, not the repeated
    ones: `{0: [h]}` removes head h from the shared block, so from every
    layer (the model with head h masked in every layer). A `T5` takes
    `{"encoder": {layer: [heads]}, "decoder": {...}, "cross_attention": {...}}`
    (see `kbert.analysis.t5_head_pruning`).

    Args:
        model: a kbert `Encoder` or `T5`, or a task or pretrainer wrapping one
            as `backbone` (rebuilt from its config around the pruned backbone).
        heads_to_prune: `{layer index: [head indices]}` (T5: by stack, above).

    Returns:
        The pruned copy, of `model`'s class.

    Example:
    >>> encoder = kbert.models.Encoder(vocabulary_size=20, num_layers=2, num_heads=4,
    ...                                hidden_dim=8, intermediate_dim=16, max_positions=8)
    >>> pruned = prune_heads(encoder, {0: [1, 2, 3], 1: [0]})
    >>> pruned.heads_per_layer, encoder.count_params() - pruned.count_params()  # 4·(4·8·2 + 3·2)
    ([1, 3], 280)
    """
    backbone = _pruned_backbone(model)
    if isinstance(backbone, T5):
        config, values = t5_pruning(backbone, heads_to_prune)
    else:
        config, values = _encoder_pruning(backbone, heads_to_prune)
    pruned_backbone = type(backbone).from_config(config)
    if model is backbone:
        copy = pruned_backbone
    else:
        copy = type(model).from_config({**model.get_config(), "backbone": pruned_backbone})
    for old, new in _matching_weights(model, copy, backbone, pruned_backbone):
        value = values.get(id(old))
        new.assign(keras.ops.convert_to_numpy(old) if value is None else value)
    return copy


def _matching_weights(model, copy, backbone, pruned_backbone):
    """`[(model's variable, copy's variable)]`: the backbones' by path, the rest in order.

    The order of a backbone's weights follows its graph, which pruning may
    reorder (PyTorch lists them as the graph runs); their paths stay.
    """
    pruned_by_path = {variable.path: variable for variable in pruned_backbone.weights}
    if sorted(pruned_by_path) != sorted(variable.path for variable in backbone.weights):
        raise ValueError(f"The pruned {type(backbone).__name__} does not have the model's weights.")
    pairs = [(variable, pruned_by_path[variable.path]) for variable in backbone.weights]
    in_backbone = {id(variable) for variable in backbone.weights + pruned_backbone.weights}
    rest = [variable for variable in model.weights if id(variable) not in in_backbone]
    copy_rest = [variable for variable in copy.weights if id(variable) not in in_backbone]
    if len(rest) != len(copy_rest):
        raise ValueError(f"The pruned {type(model).__name__} does not have the model's weights.")
    return pairs + list(zip(rest, copy_rest))


def _pruned_backbone(model):
    """The `T5` or `Encoder` that `model` is or wraps as `backbone` (else a ValueError)."""
    for candidate in (model, getattr(model, "backbone", None)):
        if isinstance(candidate, (Encoder, T5)):
            return candidate
    raise ValueError(
        "prune_heads takes a kbert Encoder or T5, or a model with one as `backbone`; "
        f"received a {type(model).__name__}."
    )


def _encoder_pruning(encoder, heads_to_prune):
    """`(the pruned encoder's config, {id(variable): pruned value})`."""
    blocks = encoder.transformer_layers
    note = ""
    if encoder.share_layers:
        # transformers' AlbertModel numbers the distinct shared layers (one in kbert's ALBERT).
        blocks = blocks[:1]
        note = (f" (its {encoder.num_layers} layers share one block, numbered as transformers' "
                "AlbertModel.prune_heads numbers them: layer 0 is the shared one)")
    kept = kept_heads([block.attention_layer.num_heads for block in blocks], heads_to_prune,
                      "the encoder", note)
    values = {}
    for block, heads in zip(blocks, kept):
        values.update(pruned_attention_values(block.attention_layer, heads))
    return _pruned_config(encoder, kept * (encoder.num_layers if encoder.share_layers else 1)), values


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

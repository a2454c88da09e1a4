"""Pruning a T5's heads: which heads, and which columns of its relative position bias stay.

`kbert.analysis.prune_heads(t5, heads_to_prune)` takes one `{layer: [heads]}`
per attention kind, under the names of T5's head masks (`encoder_head_mask`,
`decoder_head_mask`, `cross_attention_head_mask`):

    {"encoder": {layer: [heads]}, "decoder": {layer: [heads]}, "cross_attention": {layer: [heads]}}

`"encoder"` prunes the encoder's self-attention, `"decoder"` the decoder's
self-attention and `"cross_attention"` the decoder's attention to the
encoder; any may be left out. A plain `{layer: [heads]}` (int keys) is the
encoder's, which is what transformers 4's `T5Model.prune_heads` prunes (its
encoder's `SelfAttention`s). The pruned model gives the outputs of the
model with those heads masked to 0 (the head masks of `T5.run_layers`).

The relative position bias: each stack has one table `(num_buckets,
num_heads)`, a column per head, computed once and added in every layer.
transformers 4 kept the whole table when it pruned a layer, and each layer
selected the columns of the heads it kept (`position_bias[:, not pruned]`),
so heads pruned in one layer but not in another keep their column. kbert does
the same, with the config's `encoder_layer_heads` / `decoder_layer_heads`
listing the columns each layer reads, and drops a column from the table
only once no layer of its stack reads it any more (`num_buckets` parameters
fewer). Cross-attention has no position bias.
"""

import keras

from kbert.analysis.pruned_attention import kept_heads, pruned_attention_values

STACKS = ("encoder", "decoder", "cross_attention")


def t5_pruning(model, heads_to_prune):
    """`(the pruned T5's config, {id(variable): pruned value})` for `prune_heads` (see the module).

    >>> t5 = kbert.models.T5(vocabulary_size=20, num_layers=2, num_heads=3, hidden_dim=6,
    ...                      intermediate_dim=8, num_buckets=8, max_distance=16)
    >>> config, values = t5_pruning(t5, {"encoder": {0: [1]}, "cross_attention": {1: [0, 2]}})
    >>> config["encoder_layer_heads"], config["cross_attention_heads_per_layer"]
    ([[0, 2], [0, 1, 2]], [3, 1])
    """
    requests = _requests_by_stack(heads_to_prune)
    config, values = model.get_config(), {}
    for stack in STACKS:
        attentions = _attention_layers(model, stack)
        kept = kept_heads([attention.num_heads for attention in attentions],
                          requests.get(stack, {}), f"the T5's {stack}")
        for attention, heads in zip(attentions, kept):
            values.update(pruned_attention_values(attention, heads))
        if stack == "cross_attention":
            counts = [len(heads) for heads in kept]
            config["cross_attention_heads_per_layer"] = (
                None if counts == [model.num_heads] * len(counts) else counts
            )
        else:
            config[f"{stack}_layer_heads"] = _pruned_position_bias(model, stack, kept, values)
    return config, values


def _requests_by_stack(heads_to_prune):
    """`{stack: {layer: [heads]}}` from `prune_heads`' argument (int keys: the encoder's)."""
    if all(isinstance(key, int) for key in heads_to_prune):
        return {"encoder": heads_to_prune}
    unknown = sorted(str(key) for key in heads_to_prune if key not in STACKS)
    if unknown or not all(isinstance(layers, dict) for layers in heads_to_prune.values()):
        raise ValueError(
            f"prune_heads on a T5 takes {{stack: {{layer: [heads]}}}} with stacks {list(STACKS)} "
            f"(or {{layer: [heads]}} for the encoder); received {heads_to_prune}."
        )
    return heads_to_prune


def _attention_layers(model, stack):
    """The attention layers of `stack`, one per layer."""
    if stack == "encoder":
        return [block.self_attention for block in model.encoder_layers]
    if stack == "decoder":
        return [block.self_attention for block in model.decoder_layers]
    return [block.cross_attention for block in model.decoder_layers]


def _pruned_position_bias(model, stack, kept, values):
    """Each layer's position-bias columns once it keeps `kept` (None: unpruned).

    The table's value without the columns no layer reads any more goes into `values`.
    """
    columns = [[layer[head] for head in heads] for layer, heads in zip(model.layer_heads(stack), kept)]
    used = sorted({column for layer in columns for column in layer})
    renumbered = {column: index for index, column in enumerate(used)}
    layer_heads = [[renumbered[column] for column in layer] for layer in columns]
    table = getattr(model, f"{stack}_position_bias").embeddings
    if len(used) < table.shape[1]:
        values[id(table)] = keras.ops.convert_to_numpy(table)[:, used]
    return None if layer_heads == [list(range(model.num_heads))] * len(kept) else layer_heads

"""A tiny random transformers BERT imported into kbert, and transformers 4's head mask and
head pruning on it, the references of the head tests.

transformers 5 dropped BERT's `head_mask` argument and `prune_heads` method.
Both are rebuilt here on transformers' own modules, as transformers 4.x had
them: the head mask multiplied each head's attention probabilities (so its
context) in `BertSelfAttention`, here a forward hook on that module scaling
each head's slice of its output; `BertAttention.prune_heads` cut the heads'
rows of query, key and value and their columns of the output dense with
`transformers.pytorch_utils.prune_linear_layer`, as `prune_like_transformers`
does. `AlbertModel._prune_heads` did the same to the layers of its shared
groups (`prune_albert_like_transformers`).
"""

import contextlib

import numpy as np
import pytest

import kbert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LAYERS, HEADS, HIDDEN = 3, 4, 32
# float32 on both sides: round-off only (measured below 1e-5).
TOLERANCE = 1e-4


def imported_bert(directory):
    """`(transformers BertModel, the kbert Encoder imported from it)`, random weights."""
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=37, max_position_embeddings=64, attn_implementation="eager",
    )
    return imported(transformers.BertModel, config, directory)


def imported(model_class, config, directory):
    """`(a random transformers `model_class(config)`, the kbert model imported from it)`."""
    torch.manual_seed(0)
    reference = model_class(config).eval()
    with torch.no_grad():  # every weight random (LayerNorms included), so mix-ups show
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.2)
    reference.save_pretrained(directory)
    return reference, kbert.from_huggingface(directory)


def batch():
    """Two sequences of 9 tokens, the second padded after 6."""
    rng = np.random.default_rng(0)
    token_ids = rng.integers(3, 99, (2, 9)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, 6:] = 0
    return {"token_ids": token_ids * padding_mask, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": padding_mask}


def torch_inputs(inputs):
    return {"input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
            "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
            "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long)}


@contextlib.contextmanager
def head_masked(reference, head_mask):
    """`reference` (a BertModel) run with transformers 4's `head_mask` `(layers, heads)` (torch)."""
    handles = []
    for layer, factors in zip(reference.encoder.layer, head_mask):
        def scale_heads(module, args, output, factors=factors):
            context, weights = output
            heads = context.view(*context.shape[:-1], -1, module.attention_head_size)
            return (heads * factors[:, None]).view(context.shape), weights

        handles.append(layer.attention.self.register_forward_hook(scale_heads))
    try:
        yield reference
    finally:
        for handle in handles:
            handle.remove()


def pruned_like_transformers(projections, output, num_heads, head_size, heads):
    """transformers 4's pruning of one attention layer: `(the query, key and value nn.Linear
    `projections` keeping only the rows of the heads not in `heads`, `output` their columns)`."""
    prune_linear_layer = transformers.pytorch_utils.prune_linear_layer
    keep = torch.ones(num_heads, head_size)
    keep[sorted(heads)] = 0
    index = torch.arange(keep.numel())[keep.view(-1) == 1]
    return ([prune_linear_layer(projection, index) for projection in projections],
            prune_linear_layer(output, index, dim=1))


def prune_like_transformers(reference, heads_to_prune):
    """transformers 4's `BertModel.prune_heads(heads_to_prune)` ({layer: [heads]}), in place."""
    for layer_index, heads in heads_to_prune.items():
        attention = reference.encoder.layer[layer_index].attention
        size = attention.self.attention_head_size
        (attention.self.query, attention.self.key, attention.self.value), attention.output.dense = (
            pruned_like_transformers(
                [attention.self.query, attention.self.key, attention.self.value],
                attention.output.dense, attention.self.num_attention_heads, size, heads,
            )
        )
        attention.self.num_attention_heads -= len(heads)
        attention.self.all_head_size = size * attention.self.num_attention_heads
    return reference


def imported_albert(directory, layers=3):
    """`(transformers AlbertModel with `layers` layers sharing one block, the kbert
    Encoder imported from it)`, random weights."""
    config = transformers.AlbertConfig(
        vocab_size=99, embedding_size=16, hidden_size=HIDDEN, num_hidden_layers=layers,
        num_attention_heads=HEADS, intermediate_size=37, max_position_embeddings=64, attn_implementation="eager",
    )
    return imported(transformers.AlbertModel, config, directory)


def prune_albert_like_transformers(reference, heads_to_prune):
    """transformers 4's `AlbertModel._prune_heads(heads_to_prune)`, in place: layer `l` is
    inner layer `l - g·inner_group_num` of the shared group `g = l // inner_group_num`."""
    inner_group_num = reference.config.inner_group_num
    for layer_index, heads in heads_to_prune.items():
        group = layer_index // inner_group_num
        inner = layer_index - group * inner_group_num
        attention = reference.encoder.albert_layer_groups[group].albert_layers[inner].attention
        size = attention.attention_head_size
        (attention.query, attention.key, attention.value), attention.dense = pruned_like_transformers(
            [attention.query, attention.key, attention.value], attention.dense,
            attention.num_attention_heads, size, heads,
        )
        attention.num_attention_heads -= len(heads)
        attention.all_head_size = size * attention.num_attention_heads
    return reference

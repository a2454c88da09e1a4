"""A tiny random transformers BERT imported into kbert, and transformers 4's head mask and
head pruning on it, the references of the head tests.

transformers 5 dropped BERT's `head_mask` argument and `prune_heads` method.
Both are rebuilt here on transformers' own modules, as transformers 4.x had
them: the head mask multiplied each head's attention probabilities (so its
context) in `BertSelfAttention`, here a forward hook on that module scaling
each head's slice of its output; `BertAttention.prune_heads` cut the heads'
rows of query, key and value and their columns of the output dense with
`transformers.pytorch_utils.prune_linear_layer`, as `prune_like_transformers`
does.
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
    torch.manual_seed(0)
    reference = transformers.BertModel(config).eval()
    with torch.no_grad():  # every weight random (LayerNorms included), so mix-ups show
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.2)
    reference.save_pretrained(directory)
    return reference, kbert.models.from_huggingface(directory)


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


def prune_like_transformers(reference, heads_to_prune):
    """transformers 4's `BertModel.prune_heads(heads_to_prune)` ({layer: [heads]}), in place."""
    prune_linear_layer = transformers.pytorch_utils.prune_linear_layer
    for layer_index, heads in heads_to_prune.items():
        attention = reference.encoder.layer[layer_index].attention
        size = attention.self.attention_head_size
        keep = torch.ones(attention.self.num_attention_heads, size)
        keep[sorted(heads)] = 0
        index = torch.arange(keep.numel())[keep.view(-1) == 1]
        for name in ("query", "key", "value"):
            setattr(attention.self, name, prune_linear_layer(getattr(attention.self, name), index))
        attention.output.dense = prune_linear_layer(attention.output.dense, index, dim=1)
        attention.self.num_attention_heads -= len(heads)
        attention.self.all_head_size = size * attention.self.num_attention_heads
    return reference

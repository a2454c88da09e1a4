"""Hugging Face long-document checkpoints into a kbert `Encoder`: `big_bird` and `longformer`.

Both are BERT-style encoders with sparse attention, so they register
`BertConverter`s with their own config mapping and weight names:

- `big_bird` builds an `Encoder` with `attention="bigbird"` (`block_size`,
  `num_random_blocks` from the config; each layer's plan seeded with its
  index, as the reference seeds its layers), or dense attention for
  `attention_type="original_full"`. Outputs equal the reference wherever the
  reference runs full attention (sequences of at most `(5 + 2r)·block_size`
  tokens, or `original_full`); in block-sparse mode its random blocks are
  redrawn per call in training and are all block 0 at inference, which no
  fixed plan can match, so kbert's block-sparse output equals full attention
  restricted to `BigBirdAttention.attention_pattern` instead. Only
  `rescale_embeddings=False` and `use_bias=True` (every released checkpoint)
  are supported.
- `longformer` builds a RoBERTa-style `Encoder` with `attention="longformer"`
  and the one-sided window `attention_window[i] // 2` of each layer; the
  global projections are loaded too. Pass `global_attention_mask` to the
  backbone as you would to `LongformerModel`.

>>> from kbert.checkpoints.registry import converter_for
>>> converter_for("longformer").config_to_arguments({"vocab_size": 30, "hidden_size": 8,
...     "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
...     "attention_window": [4, 6]})["attention_kwargs"]
[{'window': 2}, {'window': 3}]
"""

from kbert.checkpoints.bert_converter import (
    BERT_BLOCK,
    BertConverter,
    bert_arguments,
    roberta_arguments,
)
from kbert.checkpoints.registry import register_converter


def _big_bird_arguments(config):
    for key, supported in (("rescale_embeddings", False), ("use_bias", True)):
        if config.get(key, supported) != supported:
            raise ValueError(
                f"BigBird {key}={config[key]} is not supported; kbert imports "
                f"{key}={supported} (every released BigBird encoder)."
            )
    arguments = bert_arguments(config)
    attention_type = config.get("attention_type", "block_sparse")
    if attention_type == "original_full":
        return arguments
    if attention_type != "block_sparse":
        raise ValueError(f"Unknown BigBird attention_type {attention_type!r}.")
    sparse = {
        "block_size": config.get("block_size", 64),
        "num_random_blocks": config.get("num_random_blocks", 3),
    }
    layers = arguments["num_layers"]
    return dict(
        arguments,
        attention="bigbird",
        attention_kwargs=[dict(sparse, seed=index) for index in range(layers)],
    )


def _longformer_arguments(config):
    arguments = roberta_arguments(config)
    layers = arguments["num_layers"]
    windows = config.get("attention_window", 512)
    windows = [windows] * layers if isinstance(windows, int) else list(windows)
    if len(windows) != layers or any(w <= 0 or w % 2 for w in windows):
        raise ValueError(
            f"Longformer attention_window must be one positive even number or one "
            f"per layer ({layers}); received {config.get('attention_window')}."
        )
    kwargs = [{"window": w // 2} for w in windows]
    if all(k == kwargs[0] for k in kwargs):
        kwargs = kwargs[0]
    return dict(arguments, attention="longformer", attention_kwargs=kwargs)


register_converter(BertConverter(("big_bird",), "bert.", _big_bird_arguments, pooler="pooler"))
register_converter(
    BertConverter(
        ("longformer",),
        "longformer.",
        _longformer_arguments,
        block_names={
            **BERT_BLOCK,
            "attention_layer.query_global_dense": "attention.self.query_global",
            "attention_layer.key_global_dense": "attention.self.key_global",
            "attention_layer.value_global_dense": "attention.self.value_global",
        },
    )
)

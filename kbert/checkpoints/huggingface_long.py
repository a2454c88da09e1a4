"""Hugging Face import of the long-document families: `big_bird` and `longformer`.

`kbert.checkpoints.huggingface.from_huggingface` dispatches here by
`model_type`; these are the config mappings and weight names of the two
families, in the same form as the families in `huggingface.py`.

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
"""

_BLOCK = {
    "attention_layer.query_dense": "attention.self.query",
    "attention_layer.key_dense": "attention.self.key",
    "attention_layer.value_dense": "attention.self.value",
    "attention_layer.output_dense": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "intermediate_dense": "intermediate.dense",
    "output_dense": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
_EMBEDDINGS = {
    "token_embedding": "embeddings.word_embeddings",
    "position_embedding": "embeddings.position_embeddings",
    "segment_embedding": "embeddings.token_type_embeddings",
    "layer_norm": "embeddings.LayerNorm",
}


def _big_bird_arguments(config):
    from kbert.checkpoints.huggingface import _bert_like_arguments

    for key, supported in (("rescale_embeddings", False), ("use_bias", True)):
        if config.get(key, supported) != supported:
            raise ValueError(
                f"BigBird {key}={config[key]} is not supported; kbert imports "
                f"{key}={supported} (every released BigBird encoder)."
            )
    arguments = _bert_like_arguments(config)
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
    from kbert.checkpoints.huggingface import _roberta_arguments

    arguments = _roberta_arguments(config)
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


MODEL_TYPES = {"big_bird": "big_bird", "longformer": "longformer"}

FAMILIES = {
    "big_bird": dict(
        prefix="bert.",
        arguments=_big_bird_arguments,
        embeddings=_EMBEDDINGS,
        block="encoder.layer.{i}.",
        block_names=_BLOCK,
        pooler="pooler",
    ),
    "longformer": dict(
        prefix="longformer.",
        arguments=_longformer_arguments,
        embeddings=_EMBEDDINGS,
        block="encoder.layer.{i}.",
        block_names={
            **_BLOCK,
            "attention_layer.query_global_dense": "attention.self.query_global",
            "attention_layer.key_global_dense": "attention.self.key_global",
            "attention_layer.value_global_dense": "attention.self.value_global",
        },
        pooler="pooler.dense",
    ),
}

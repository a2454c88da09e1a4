"""`from_huggingface`: a kbert backbone from a local Hugging Face checkpoint directory.

The directory holds `config.json` and the weights (`model.safetensors`,
sharded safetensors, or `pytorch_model.bin`, see
`kbert.checkpoints.weight_mapping.read_tensors`). Nothing is downloaded:
fetch it first (e.g. `huggingface_hub.snapshot_download`) and pass its path.
The config's `model_type` picks the converter from
`kbert.checkpoints.registry`; the converters are one module per family group,
each registering itself when imported here. Adding a family: one converter
module, and its import below.
"""

import os

# Importing a converter module registers its converters.
from kbert.checkpoints import (  # noqa: F401
    bart_converter,
    bert_converter,
    gpt2_converter,
    long_document_converter,
    t5_converter,
    xlnet_converter,
)
from kbert.checkpoints.registry import converter_for
from kbert.checkpoints.weight_mapping import read_config


def from_huggingface(path, **overrides):
    """Build a kbert backbone from a local Hugging Face checkpoint directory.

    What comes back depends on the config's `model_type`:

    - a `kbert.models.Encoder` for the encoder families: `bert`; `roberta`,
      `xlm-roberta`, `camembert`; `albert`; `electra`; `distilbert`;
      `roberta-prelayernorm` (`kbert.checkpoints.bert_converter`), and `big_bird`,
      `longformer` (`kbert.checkpoints.long_document_converter`);
    - a `kbert.models.T5` backbone for `t5`, v1.0 and v1.1
      (`kbert.checkpoints.t5_converter`);
    - a `kbert.models.GPT2` for `gpt2` (`kbert.checkpoints.gpt2_converter`),
      whose `logits` output is `GPT2LMHeadModel`'s;
    - a `kbert.models.XLNet` for `xlnet` (`kbert.checkpoints.xlnet_converter`).

    Task checkpoints (`BertForMaskedLM`, `RobertaForSequenceClassification`,
    `T5ForConditionalGeneration` …) load their backbone; head tensors are
    ignored. Old LayerNorm names (`gamma`/`beta`) are accepted. The model is
    built under the current Keras dtype policy (float32 by default), whatever
    dtype the checkpoint stores (float16 and bfloat16 tensors are widened);
    pass `dtype=...` to choose another. Every kbert variable is filled.

    Args:
        path: directory with `config.json` and `model.safetensors` (or sharded
            safetensors, or `pytorch_model.bin`).
        **overrides: constructor arguments that replace those read from the
            config, e.g. `dtype="mixed_bfloat16"`, `dropout=0.0`, or
            `use_pooler=False`.

    Returns:
        The backbone (`Encoder`, `T5`, `GPT2` or `XLNet`, as above) with every weight loaded.

    Raises:
        FileNotFoundError: `path` is not a directory, or lacks the config or weights.
        ValueError: an unsupported `model_type` or config option, or a missing
            or mis-shaped tensor (named in the message).

    Example:
    ```python
    # Saved beforehand with transformers: BertModel(...).save_pretrained(path)
    backbone = kbert.from_huggingface(path)
    outputs = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    outputs["sequence_output"]  # == BertModel's last_hidden_state
    ```
    """
    directory = os.fspath(path)
    config = read_config(directory)
    try:
        converter = converter_for(config.get("model_type"))
    except ValueError as error:
        raise ValueError(f"{error} (in {os.path.join(directory, 'config.json')})") from None
    return converter.load(config, directory, **overrides)

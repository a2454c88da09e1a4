"""Import of public checkpoints into kbert backbones.

`from_huggingface(path)` builds the kbert backbone of a local Hugging Face
checkpoint directory (an `Encoder` for BERT-style and long-document families,
a `T5` for T5); `kbert.models.from_huggingface` forwards to it. Each family
group has a converter module (`bert_converter`, `long_document_converter`,
`t5_converter`: `Converter`s, see `converter.py`) that registers itself by
`model_type` in `registry`; the helpers they share (reading files, naming and
assigning tensors) are in `weight_mapping`.
"""

from kbert.checkpoints.huggingface import from_huggingface
from kbert.checkpoints.registry import converter_for, register_converter, supported_model_types

__all__ = ["converter_for", "from_huggingface", "register_converter", "supported_model_types"]

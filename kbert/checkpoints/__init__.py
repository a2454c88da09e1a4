"""Import of public checkpoints into kbert backbones.

`from_huggingface(path)` builds the kbert backbone of a local Hugging Face
checkpoint directory (an `Encoder` for BERT-style and long-document families,
a `T5` for T5), and `from_huggingface_task(path)` a task model with its
fine-tuned head; `kbert.from_huggingface` and `kbert.from_huggingface_task`
are the same functions. `to_huggingface(model, folder)` (`kbert.to_huggingface`)
writes a kbert model back out as a folder transformers loads;
`to_keras_hub` and `from_keras_hub` trade backbones with KerasHub presets. Each family
group has a converter module (`bert_converter`, `long_document_converter`,
`t5_converter`: `Converter`s, see `converter.py`) that registers itself by
`model_type` in `registry`; the helpers they share (reading files, naming and
assigning tensors) are in `weight_mapping`.
"""

from kbert.checkpoints.huggingface import from_huggingface
from kbert.checkpoints.registry import converter_for, register_converter, supported_model_types
from kbert.checkpoints.huggingface_export import to_huggingface
from kbert.checkpoints.keras_hub_bridge import from_keras_hub, to_keras_hub
from kbert.checkpoints.task_head_converter import from_huggingface_task

__all__ = ["converter_for", "from_huggingface", "from_huggingface_task", "from_keras_hub", "register_converter",
           "supported_model_types", "to_huggingface", "to_keras_hub"]

"""Import of public checkpoints into kbert models.

`huggingface.from_huggingface(path)` builds a `kbert.models.Encoder` from a
local Hugging Face checkpoint directory (BERT, RoBERTa/XLM-R/CamemBERT, ALBERT,
ELECTRA, DistilBERT); `kbert.models.from_huggingface` forwards to it.
"""

from kbert.checkpoints.huggingface import from_huggingface

__all__ = ["from_huggingface"]

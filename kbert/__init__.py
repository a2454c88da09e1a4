"""kbert: a Keras 3 layer kit for the BERT family, on TensorFlow, JAX and PyTorch.

>>> import kbert
>>> backbone = kbert.models.bert_tiny()
>>> sorted(backbone.output.keys())
['pooled_output', 'sequence_output']
"""

import os

# TensorFlow's C++ start-up messages are noise for a kbert user; keep them out
# of the console unless the user has asked for them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from kbert.backend.imports import quiet_import  # noqa: E402

# Under the TensorFlow backend, `import keras` imports TensorFlow.
quiet_import("keras")

from kbert import layers  # noqa: E402
from kbert import models  # noqa: E402
from kbert import training  # noqa: E402

# Imported here so that every kbert serializable class (pretrainers, task
# models) is registered once `kbert` is: `keras.saving.load_model` finds them.
from kbert import generation  # noqa: E402
from kbert import pretraining  # noqa: E402
from kbert import tasks  # noqa: E402
from kbert import analysis  # noqa: E402
from kbert import checkpoints  # noqa: E402
from kbert.checkpoints import (  # noqa: E402
    from_huggingface,
    from_huggingface_task,
    from_keras_hub,
    to_huggingface,
    to_keras_hub,
)

__version__ = "0.1.0"
__all__ = [
    "analysis",
    "checkpoints",
    "from_huggingface",
    "from_huggingface_task",
    "from_keras_hub",
    "generation",
    "layers",
    "models",
    "pretraining",
    "tasks",
    "to_huggingface",
    "to_keras_hub",
    "training",
    "__version__",
]

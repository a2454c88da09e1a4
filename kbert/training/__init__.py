"""What every trainable kbert model shares: the `Task` base, losses, metric trackers, optimizers.

Both `kbert.pretraining` and `kbert.tasks` build on this package; it imports
neither of them.

>>> from kbert.training import create_optimizer
>>> optimizer = create_optimizer("adamw", 1e-4, total_steps=10, warmup_steps=1)
>>> type(optimizer).__name__
'AdamW'
"""

from kbert.training.adam_w import AdamW
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.optimizers import create_optimizer
from kbert.training.task import Task
from kbert.training.warmup_linear_decay import WarmupLinearDecay

__all__ = ["AdamW", "Task", "WarmupLinearDecay", "create_optimizer", "predict_by_length"]

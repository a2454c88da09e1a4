"""Looking inside trained models: head importance and head pruning.

>>> from kbert.analysis import head_importance
>>> head_importance.__name__
'head_importance'
"""

from kbert.analysis.head_importance import head_importance
from kbert.analysis.head_pruning import least_important_heads, prune_heads

__all__ = ["head_importance", "least_important_heads", "prune_heads"]

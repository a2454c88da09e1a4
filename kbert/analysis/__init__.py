"""Looking inside trained models: attention statistics, layer-wise probing, head importance and pruning.

>>> from kbert.analysis import head_importance
>>> head_importance.__name__
'head_importance'
"""

from kbert.analysis.attention_statistics import AttentionStatistics
from kbert.analysis.head_importance import head_importance
from kbert.analysis.head_pruning import least_important_heads, prune_heads
from kbert.analysis.layer_probe import LayerProbe, expected_layer

__all__ = [
    "AttentionStatistics",
    "LayerProbe",
    "expected_layer",
    "head_importance",
    "least_important_heads",
    "prune_heads",
]

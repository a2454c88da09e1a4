"""Looking inside trained models: attention statistics and layer-wise probing."""

from kbert.analysis.attention_statistics import AttentionStatistics
from kbert.analysis.layer_probe import LayerProbe, expected_layer

__all__ = ["AttentionStatistics", "LayerProbe", "expected_layer"]

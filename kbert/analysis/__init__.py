"""Looking inside trained models: attention statistics and layer-wise probing."""

from kbert.analysis.attention_statistics import AttentionStatistics

__all__ = ["AttentionStatistics"]

"""Building blocks: embeddings, attention, the encoder and decoder blocks, heads."""

from kbert.layers.activations import gelu_approximate, get_activation
from kbert.layers.attention_mask import merge_attention_masks
from kbert.layers.bigbird_attention import BigBirdAttention
from kbert.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kbert.layers.causal_decoder_block import CausalDecoderBlock
from kbert.layers.character_cnn import CharacterCNN
from kbert.layers.cross_attention_decoder_block import CrossAttentionDecoderBlock
from kbert.layers.dropout import Dropout
from kbert.layers.encoder_block import EncoderBlock
from kbert.layers.fused_dense import FusedDense
from kbert.layers.highway import Highway
from kbert.layers.language_model_head import LanguageModelHead
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.longformer_attention import LongformerAttention
from kbert.layers.masked_lm_head import MaskedLMHead
from kbert.layers.multi_head_attention import MultiHeadAttention
from kbert.layers.pooler import Pooler
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.projected_lstm import ProjectedLSTM
from kbert.layers.relative_position_bias import RelativePositionBias
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.rms_normalization import RMSNormalization
from kbert.layers.scalar_mix import ScalarMix
from kbert.layers.span_boundary_head import SpanBoundaryHead
from kbert.layers.t5_block import T5Block
from kbert.layers.text_embedding import TextEmbedding
from kbert.layers.two_stream_encoder_block import TwoStreamEncoderBlock
from kbert.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from kbert.layers.vocabulary_head import VocabularyHead

__all__ = [
    "BigBirdAttention",
    "CachedMultiHeadAttention",
    "CausalDecoderBlock",
    "CharacterCNN",
    "CrossAttentionDecoderBlock",
    "Dropout",
    "EncoderBlock",
    "FusedDense",
    "Highway",
    "LanguageModelHead",
    "LayerNormalization",
    "LongformerAttention",
    "MaskedLMHead",
    "MultiHeadAttention",
    "Pooler",
    "PositionEmbedding",
    "ProjectedLSTM",
    "RMSNormalization",
    "RelativePositionBias",
    "ReversibleEmbedding",
    "ScalarMix",
    "SpanBoundaryHead",
    "T5Block",
    "TextEmbedding",
    "TwoStreamEncoderBlock",
    "TwoStreamRelativeAttention",
    "VocabularyHead",
    "gelu_approximate",
    "get_activation",
    "merge_attention_masks",
]

"""Text generation with encoder-decoder models: greedy, sampling, beam search.

>>> from kbert.models import T5
>>> from kbert.generation import Seq2SeqGenerator
>>> model = T5(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
>>> generator = Seq2SeqGenerator(model, max_new_tokens=4)
>>> generator({"encoder_token_ids": [[5, 6, 1]], "encoder_padding_mask": [[1, 1, 1]]}).shape
(1, 4)
"""

from kbert.generation.seq2seq_generator import STRATEGIES, Seq2SeqGenerator

__all__ = ["STRATEGIES", "Seq2SeqGenerator"]

"""Text generation: greedy, sampling and beam search, for encoder-decoder and decoder-only models.

`Seq2SeqGenerator` decodes with an encoder-decoder (`kbert.models.T5`),
`CausalLMGenerator` continues prompts with a decoder-only model
(`kbert.models.GPT2`); both run the loop of `kbert.generation.generator` and
choose tokens with `kbert.generation.samplers`.

>>> from kbert.models import T5
>>> from kbert.generation import Seq2SeqGenerator
>>> model = T5(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
>>> generator = Seq2SeqGenerator(model, max_new_tokens=4)
>>> generator({"encoder_token_ids": [[5, 6, 1]], "encoder_padding_mask": [[1, 1, 1]]}).shape
(1, 4)
"""

from kbert.generation.causal_lm_generator import CausalLMGenerator
from kbert.generation.samplers import STRATEGIES
from kbert.generation.seq2seq_generator import Seq2SeqGenerator

__all__ = ["STRATEGIES", "CausalLMGenerator", "Seq2SeqGenerator"]

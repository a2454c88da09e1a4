"""`kbert tour`: build a model by its builder name and run it on one sentence, whatever its family.

Every family shows its inputs, its outputs' shapes, the first values of one
output vector and the time of a forward pass (after a first, tracing call):

- the encoders (`kbert.models.PRESETS`) read `[CLS] sentence [SEP]`;
- XLNet reads `sentence [SEP] [CLS]`, its summary token last;
- the decoders (GPT-2) read the sentence and continue it by `NEW_TOKENS`
  greedy tokens (`kbert.tasks.CausalLM.generate`);
- the encoder-decoders (T5, BART) encode the sentence, run the decoder on its
  start token and generate `NEW_TOKENS` greedy tokens
  (`kbert.tasks.Seq2SeqLM.generate`);
- ELMo reads the characters of `<S> sentence </S>` and gives its layer
  representations.

The models are randomly initialised, so generated ids are printed as ids.
Words are numbered in order of appearance after `SPECIAL_TOKENS`: a stand-in
for a tokenizer, so that the model sees a well-formed input.

>>> lines = []
>>> run_tour("bert_tiny", "Hello, world!", log=lines.append)
>>> lines[3].split()
['tokens', '[CLS]', 'hello', ',', 'world', '!', '[SEP]']
"""

import re
import time

import keras
import numpy as np

from kbert.models.bart import BART
from kbert.models.elmo import ELMo
from kbert.models.gpt2 import GPT2
from kbert.models.presets import build
from kbert.models.t5 import T5
from kbert.models.xlnet import XLNet
from kbert.tasks.causal_lm import CausalLM
from kbert.tasks.seq2seq_lm import Seq2SeqLM
from kbert.text.character_ids import character_ids
from kbert.text.last_token_layout import CLS_SEGMENT_ID

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
NEW_TOKENS = 4


def sentence_ids(sentence, vocabulary_size, wrap=True):
    """`(tokens, ids)`: the sentence's words and punctuation, numbered in order of appearance.

    Ids are unique per distinct word, after `SPECIAL_TOKENS`; with `wrap` the
    tokens are `[CLS] ... [SEP]`, as an encoder reads them.

    >>> sentence_ids("To be or not to be.", 100, wrap=False)
    (['to', 'be', 'or', 'not', 'to', 'be', '.'], [5, 6, 7, 8, 5, 6, 9])
    """
    words = re.findall(r"\w+|[^\w\s]", sentence.lower())
    if not words:
        raise ValueError("the sentence holds no word.")
    vocabulary = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for word in words:
        vocabulary.setdefault(word, len(vocabulary))
    if len(vocabulary) > vocabulary_size:
        raise ValueError(f"the sentence has more distinct words than the vocabulary ({vocabulary_size}).")
    tokens = ["[CLS]", *words, "[SEP]"] if wrap else words
    return tokens, [vocabulary[token] for token in tokens]


def _check_length(name, model, length):
    """A `ValueError` when `length` tokens do not fit the learned positions of `model`."""
    usable = getattr(model, "max_positions", None)
    if usable is not None and length > usable - getattr(model, "position_offset", 0):
        raise ValueError(f"the sentence is longer than {name}'s positions.")


def _row(ids):
    ids = np.array([ids], dtype="int32")
    return ids, np.ones_like(ids)


def _encoder_inputs(name, model, sentence):
    tokens, ids = sentence_ids(sentence, model.vocabulary_size)
    _check_length(name, model, len(ids))
    token_ids, padding_mask = _row(ids)
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    if model.num_segments:
        inputs["segment_ids"] = np.zeros_like(token_ids)
    return tokens, inputs


def _xlnet_inputs(name, model, sentence):
    """XLNet's layout: `sentence [SEP] [CLS]`, the summary token last with its own segment (2)."""
    tokens, ids = sentence_ids(sentence, model.vocabulary_size)
    tokens, ids = [*tokens[1:], tokens[0]], [*ids[1:], ids[0]]
    token_ids, padding_mask = _row(ids)
    segment_ids = np.zeros_like(token_ids)
    segment_ids[:, -1] = CLS_SEGMENT_ID
    return tokens, {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _decoder_inputs(name, model, sentence):
    tokens, ids = sentence_ids(sentence, model.vocabulary_size, wrap=False)
    _check_length(name, model, len(ids) + NEW_TOKENS)
    token_ids, padding_mask = _row(ids)
    return tokens, {"token_ids": token_ids, "padding_mask": padding_mask}


def _encoder_decoder_inputs(name, model, sentence):
    tokens, ids = sentence_ids(sentence, model.vocabulary_size, wrap=False)
    _check_length(name, model, max(len(ids), NEW_TOKENS + 1))
    token_ids, padding_mask = _row(ids)
    start_ids, start_mask = _row([model.decoder_start_id])
    return tokens, {"encoder_token_ids": token_ids, "encoder_padding_mask": padding_mask,
                    "decoder_token_ids": start_ids, "decoder_padding_mask": start_mask}


def _elmo_inputs(name, model, sentence):
    tokens = ["<S>", *sentence_ids(sentence, np.inf, wrap=False)[0], "</S>"]
    characters = character_ids(tokens, max_characters=model.max_characters)[None]
    return tokens, {"character_ids": characters, "padding_mask": np.ones(characters.shape[:2], "int32")}


def _generated(lm_class, model, inputs):
    """The ids that `lm_class(model).generate` continues `inputs` with (greedy, `NEW_TOKENS` of them)."""
    if lm_class is Seq2SeqLM:
        inputs = {key: value for key, value in inputs.items() if key.startswith("encoder_")}
    return lm_class(model).generate(inputs, max_new_tokens=NEW_TOKENS)[0].tolist()


# family: (model classes, inputs, the output whose first vector is shown, the language model that generates)
_FAMILIES = {
    "encoder": (None, _encoder_inputs, "sequence_output", None),
    "permutation LM": ((XLNet,), _xlnet_inputs, "sequence_output", None),
    "decoder": ((GPT2,), _decoder_inputs, "sequence_output", CausalLM),
    "encoder-decoder": ((T5, BART), _encoder_decoder_inputs, "decoder_sequence_output", Seq2SeqLM),
    "biLM": ((ELMo,), _elmo_inputs, "layer_outputs", None),
}


def model_inputs(name, model, sentence):
    """`(tokens, inputs)`: the batch of one row that the tour feeds `model` (built as `name`) for `sentence`.

    >>> import kbert
    >>> tokens, inputs = model_inputs("gpt2", kbert.models.gpt2_tiny(num_layers=1), "Hello!")
    >>> tokens, sorted(inputs), inputs["token_ids"].tolist()
    (['hello', '!'], ['padding_mask', 'token_ids'], [[5, 6]])
    """
    return _FAMILIES[_family(model)][1](name, model, sentence)


def _family(model):
    for family, (classes, *_) in _FAMILIES.items():
        if classes and isinstance(model, classes):
            return family
    return "encoder"


def _shape_line(model, family):
    if family == "biLM":
        return f"{model.num_layers} LSTM layers per direction, hidden {model.hidden_dim}, cells {model.cell_dim}"
    return f"{model.num_layers} layers, hidden {model.hidden_dim}, {model.num_heads} heads"


def run_tour(name, sentence, log=print):
    """Build the model `name`, run it on `sentence` and `log` what goes in and comes out.

    Raises `ValueError` for an unknown model, or a sentence with no word, too
    many distinct words for the vocabulary, or too long for the positions.
    """
    model = build(name)
    family = _family(model)
    _, _, shown, lm_class = _FAMILIES[family]
    tokens, inputs = model_inputs(name, model, sentence)
    model(inputs)  # first call: trace and warm up
    start = time.perf_counter()
    outputs = model(inputs)
    seconds = time.perf_counter() - start
    rows = [("backend", keras.backend.backend()),
            ("model", f"{name}, {family} ({_shape_line(model, family)})"),
            ("parameters", f"{model.count_params():,}"),
            ("tokens", " ".join(tokens)),
            *((f"input  {key}", tuple(value.shape)) for key, value in inputs.items()),
            *((f"output {key}", tuple(value.shape)) for key, value in outputs.items())]
    first = keras.ops.convert_to_numpy(outputs[shown]).reshape(-1, outputs[shown].shape[-1])[0, :4]
    rows += [(f"{shown}[0][:4]", np.array2string(first, precision=4)),
             ("forward time", f"{seconds * 1000:.1f} ms")]
    if lm_class is not None:
        rows.append(("generated ids", f"{_generated(lm_class, model, inputs)} ({NEW_TOKENS} greedy tokens, "
                                      "random weights)"))
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        log(f"{label:<{width}}{value}")

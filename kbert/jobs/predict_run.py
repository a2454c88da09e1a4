"""The CLI's `kbert predict`: a saved model and text in, one JSON object per input out.

`load_predictor` takes what `--model` names:

- a kbert `.keras` file (a task model or pretrainer, its preprocessor inside;
  an older file takes the `vocab.txt`, `spiece.model` or `vocab.json` +
  `merges.txt` beside it);
- a run folder of `kbert finetune` or `kbert pretrain` (its `model.keras`);
- a Hugging Face folder with a task head (`…ForSequenceClassification`,
  `…ForTokenClassification`, `…ForQuestionAnswering`, `…ForMultipleChoice`
  (as many choices as the inputs give; checkpoints do not store it),
  `BertForMaskedLM`, through `kbert.from_huggingface_task`; `GPT2LMHeadModel`,
  `T5ForConditionalGeneration` and `BartForConditionalGeneration` for
  generation), with its tokenizer files and its `id2label` names.

`predict_batch` runs the model's text-level call on a batch of inputs and
gives the JSON fields of its task (see `kbert.cli`); `run_predict` reads
`--input` files in chunks, batches each chunk's texts by length and writes
the results in input order as each chunk is done.
"""

import contextlib
import itertools
import json
import os
import sys
import zipfile

import keras
import numpy as np
from scipy.special import softmax

from kbert.checkpoints.checkpoint_loading import tokenizer_beside
from kbert.pretraining import (BertPretrainer, ElectraPretrainer, SpanBertPretrainer, StructBertPretrainer,
                               XLNetPretrainer)
from kbert.tasks.readers import json_rows
from kbert.tasks import CausalLM, MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier

DEFAULT_SEQUENCE_LENGTH = 128
# The pretrainers whose masks `fill_blanks` fills (`BertPretrainer` has `fill_mask`).
BLANK_FILLERS = (StructBertPretrainer, SpanBertPretrainer, ElectraPretrainer, XLNetPretrainer)
# A chunk of `--input` lines is this many batches: sorted by length inside it, written before the next is read.
CHUNK_BATCHES = 32
_GENERATORS = {"GPT2LMHeadModel": CausalLM, "T5ForConditionalGeneration": Seq2SeqLM,
               "BartForConditionalGeneration": Seq2SeqLM}


def _preprocessor(folder, sequence_length, labels=None):
    """A `TextPreprocessor` over the tokenizer files in `folder`; a `FileNotFoundError` when there are none."""
    from kbert.text.text_preprocessor import TextPreprocessor

    tokenizer = tokenizer_beside(folder)
    if tokenizer is None:
        raise FileNotFoundError(f"The model has no preprocessor inside and {folder} has no vocab.txt, spiece.model "
                                "or vocab.json with merges.txt beside it.")
    return TextPreprocessor(tokenizer, sequence_length, labels=labels)


def _run_sequence_length(folder):
    """The `sequence_length` of the run that left `folder`, from its metrics.json, or the default."""
    path = os.path.join(folder, "metrics.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            metrics = json.load(f)
        if isinstance(metrics, dict) and isinstance(metrics.get("sequence_length"), int):
            return metrics["sequence_length"]
    return DEFAULT_SEQUENCE_LENGTH


def _usable_length(model, length):
    """`length`, cut to the positions of the model's backbone (T5's relative positions take any)."""
    backbone = getattr(model, "backbone", None)
    if not hasattr(backbone, "max_positions"):
        return length
    return min(length, backbone.max_positions - getattr(backbone, "position_offset", 0))


def _read_keras(path):
    """`keras.saving.load_model(path)`; a file that is no `.keras` archive is a one-line `ValueError` saying so."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a .keras file (a zip archive): it may be cut short or corrupt.")
    return keras.saving.load_model(path)


def _load_keras(path):
    model = _read_keras(path)
    if getattr(model, "preprocessor", "absent") is None:  # a task saved before preprocessors
        folder = os.path.dirname(path) or "."
        model.preprocessor = _preprocessor(folder, _usable_length(model, _run_sequence_length(folder)))
    return model


def _load_huggingface(folder, num_choices=None):
    from kbert.checkpoints import from_huggingface, from_huggingface_task
    from kbert.checkpoints.weight_mapping import read_config

    config = read_config(folder)
    architecture = (config.get("architectures") or [""])[0]
    if architecture.endswith("ForMultipleChoice") and num_choices is None:
        raise ValueError(f"{architecture} checkpoints do not store their number of choices: give it in "
                         "--input lines with \"choices\" lists, all of one length.")
    if architecture in _GENERATORS:
        model = _GENERATORS[architecture](from_huggingface(folder))
    else:
        model = from_huggingface_task(folder, num_choices=num_choices)
    labels = config.get("id2label")
    labels = [labels[str(i)] for i in range(len(labels))] if labels and not isinstance(model, CausalLM) else None
    model.preprocessor = _preprocessor(folder, _usable_length(model, DEFAULT_SEQUENCE_LENGTH), labels)
    return model


def load_predictor(path, num_choices=None):
    """The model `path` names (see the module docstring), with its preprocessor.

    `num_choices` is for a Hugging Face multiple-choice folder, which does not store it.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "model.keras")):
            return _load_keras(os.path.join(path, "model.keras"))
        if os.path.isfile(os.path.join(path, "config.json")):
            return _load_huggingface(path, num_choices)
        raise FileNotFoundError(f"{path} holds neither a model.keras (a kbert run) nor a config.json "
                                "(a Hugging Face checkpoint).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--model not found: {path}")
    if not path.endswith(".keras"):
        raise ValueError(f"--model takes a .keras file or a folder; received {path}.")
    return _load_keras(path)


def input_chunks(path, size):
    """Lists of at most `size` `(line number, object)` of a JSONL file, read as they are needed (blank
    lines skipped).

    Each object has `text`, and as the task needs, `text_pair`, `question` or `choices`. A bad line
    (not JSON, no or an empty `text`, bytes that are not UTF-8, a lone surrogate) is a `ValueError`
    that names the file and the line.
    """
    chunk = []
    for number, record in json_rows(path):
        if not isinstance(record.get("text"), str):
            raise ValueError(f"{path}, line {number}: expected a JSON object with a \"text\" string.")
        if not record["text"].strip():
            raise ValueError(f"{path}, line {number}: the \"text\" is empty.")
        chunk.append((number, record))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _needs(records, key, what):
    for record in records:
        if record.get(key) is None:
            raise ValueError(f"This model is {what}: give a {key.replace('_', '-')} with each text.")
    return [record[key] for record in records]


def fill_blanks(model, text, top_k=5):
    """The `top_k` tokens, with their probabilities, for each mask token of `text`, from a pretraining run's
    StructBERT, SpanBERT, ELECTRA (its generator) or XLNet (its query stream): one call per mask, as the
    run's fill-in-the-blank demo asks (`kbert.jobs.language_model_objectives`)."""
    from kbert.jobs.language_model_objectives import masked_inputs, masked_lm_logits, permutation_lm_logits

    preprocessor = model.text_preprocessor("predict")
    tokenizer = preprocessor.tokenizer
    ids = preprocessor.token_ids([text])[0]
    positions = [index for index, token in enumerate(ids) if token == tokenizer.mask_id]
    if not positions:
        raise ValueError(f"the text has no {preprocessor.token_string(tokenizer.mask_id)} to fill.")
    logits_at = permutation_lm_logits if isinstance(model, XLNetPretrainer) else masked_lm_logits
    slots = []
    for position in positions:
        x = masked_inputs(tokenizer, ids[:position], ids[position + 1:], preprocessor.sequence_length)
        if x is None:
            raise ValueError(f"a mask lies past the first {preprocessor.sequence_length} tokens.")
        scores = softmax(np.asarray(logits_at(model, x), np.float64))
        best = np.argsort(-scores[: tokenizer.vocabulary_size], kind="stable")[: int(top_k)]  # tokens it can write
        slots.append([{"token": preprocessor.token_string(int(i)), "score": float(scores[i])} for i in best])
    return {"predictions": slots}


def _fill_mask(model, texts, top_k, batch_size):
    return [{"predictions": [[{"token": p["token"], "score": p["score"]} for p in slot]
                             for slot in result["predictions"]]}
            for result in model.fill_mask(texts, top_k=top_k, batch_size=batch_size)]


def predict_batch(model, records, top_k=5, max_new_tokens=32, batch_size=32):
    """The JSON results of `model`'s text-level call on inputs `{"text", ...}` of one kind (all with a
    `text_pair`, or none), in batches of `batch_size` texts of similar length."""
    texts = [record["text"] for record in records]
    if isinstance(model, TextClassifier):
        pairs = [record["text_pair"] for record in records] if records[0].get("text_pair") is not None else None
        return model.classify(texts, text_pairs=pairs, batch_size=batch_size)
    if isinstance(model, TokenClassifier):
        return model.tag(texts, batch_size=batch_size)
    if isinstance(model, SpanQuestionAnswering):
        questions = _needs(records, "question", "a question-answering model (the text is the context)")
        return model.answer(questions, texts, batch_size=batch_size)
    if isinstance(model, MultipleChoice):
        results = model.choose(texts, _needs(records, "choices", "a multiple-choice model"), batch_size=batch_size)
        return [{"choice": result["choice"], "scores": result["scores"]} for result in results]
    if isinstance(model, BertPretrainer):
        return _fill_mask(model, texts, top_k, batch_size)
    if isinstance(model, BLANK_FILLERS):
        return [fill_blanks(model, text, top_k) for text in texts]
    if isinstance(model, (CausalLM, Seq2SeqLM)):
        return [{"generated": text} for text in model.generate(texts, max_new_tokens=max_new_tokens,
                                                               batch_size=batch_size)]
    raise ValueError(f"kbert predict runs classifiers, taggers, question answering, multiple choice, masked LMs "
                     f"and generators; the model is a {type(model).__name__}.")


# The input fields beside `text` and the models they apply to.
_APPLIES = {"text_pair": ((TextClassifier,), "a sentence-pair classifier"),
            "question": ((SpanQuestionAnswering,), "question answering"),
            "choices": ((MultipleChoice,), "multiple choice")}


def refuse_inapplicable(model, record, place=None):
    """A one-line `ValueError` when `record` gives a field `model` does not read (`--question` to a classifier).

    `place` is where the record is (`"path, line n"`), None for the command line's options.
    """
    for key, (classes, what) in _APPLIES.items():
        if record.get(key) is not None and not isinstance(model, classes):
            name = f"{place}: \"{key}\"" if place else f"--{key.replace('_', '-')}"
            raise ValueError(f"{name} is for {what}; the model is a {type(model).__name__}.")


def _predict_chunk(model, chunk, where, options):
    """The results of one chunk of `(line number, record)`, in its order; a bad input's error names its line."""
    kinds = {}  # a classifier's single texts and pairs go in calls of their own
    for index, (number, record) in enumerate(chunk):
        refuse_inapplicable(model, record, where(number).rstrip(": ") or None)
        kinds.setdefault(record.get("text_pair") is not None, []).append(index)
    results = [None] * len(chunk)
    for indices in kinds.values():
        records = [chunk[i][1] for i in indices]
        try:
            found = predict_batch(model, records, **options)
        except ValueError:  # find the input, and name its line
            for index in indices:
                number, record = chunk[index]
                try:
                    predict_batch(model, [record], **options)
                except ValueError as error:
                    raise ValueError(f"{where(number)}{error}") from None
            raise
        for index, result in zip(indices, found):
            results[index] = result
    return results


def _progress(path):
    """A `keras.utils.Progbar` over the lines of `path` writing to stderr, when stderr is a terminal; else None."""
    if not sys.stderr.isatty():
        return None
    with open(path, "rb") as f:
        lines = sum(1 for line in f if line.strip())
    with contextlib.redirect_stdout(sys.stderr):  # Keras' bar writes to stdout, which holds the results
        return keras.utils.Progbar(lines, unit_name="text")


def run_predict(model, inputs, top_k=5, max_new_tokens=32, write=print, batch_size=32, progress=None):
    """Load `model` (a path) and write one JSON line per input with `write`, in input order.

    `inputs` is a list of dicts with `text`, ... (`--text`), or the path of a JSONL file
    (`--input`), read in chunks of `CHUNK_BATCHES` batches: each chunk is predicted in batches of
    `batch_size` texts of similar length and written before the next is read, so memory stays flat
    on any number of lines. `progress` (None: when stderr is a terminal and `inputs` a file) shows a
    progress bar on stderr.
    """
    if int(top_k) < 1:
        raise ValueError(f"--top-k must be at least 1; received {top_k}.")
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise ValueError(f"--batch-size must be at least 1; received {batch_size}.")
    if isinstance(inputs, (str, os.PathLike)):
        path = os.fspath(inputs)
        chunks = input_chunks(path, int(batch_size) * CHUNK_BATCHES)
        first = next(chunks, None)
        if first is None:
            raise ValueError(f"{path} holds no inputs (the file is empty, or blank lines only).")
        chunks = itertools.chain([first], chunks)
        where = f"{path}, line {{}}: ".format
        progress = _progress(path) if progress is None else progress
    else:
        first = list(enumerate(inputs, start=1))
        chunks, where = [first], "".format
    counts = {len(record["choices"]) for _, record in first if isinstance(record.get("choices"), list)}
    predictor = load_predictor(model, counts.pop() if len(counts) == 1 else None)
    options = dict(top_k=int(top_k), max_new_tokens=max_new_tokens, batch_size=int(batch_size))
    done = 0
    for chunk in chunks:
        for result in _predict_chunk(predictor, chunk, where, options):
            write(json.dumps(result, ensure_ascii=False))
        sys.stdout.flush()
        done += len(chunk)
        if progress:
            with contextlib.redirect_stdout(sys.stderr):
                progress.update(done)

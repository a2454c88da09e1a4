"""The main job, `kbert pretrain`: raw text to a pretrained, evaluated, saved model.

With no corpus it uses the Python interpreter's bundled reference documentation
(`pydoc_data.topics`, present in every CPython install), so it runs on a fresh
machine with no download. The steps:

1. read the corpus into documents and hold out every tenth document;
2. learn a WordPiece vocabulary from the training documents (or reuse the one
   in the output folder when resuming the same run);
3. build the model (`--model`, sized to the vocabulary, with
   `SHORT_RUN_OVERRIDES`) and the objective's pretrainer (a
   `kbert.tasks.CausalLM` for `clm`, which trains the GPT-2 models), an
   AdamW optimizer with warm-up and linear decay;
4. `fit` with a progress bar, checkpointed every `save_every` steps and on
   SIGINT or SIGTERM, so that an interrupted run (even by `kill -9`) resumes
   at the exact step and batch, and ends as an uninterrupted one would
   (`kbert.resumable_run.ResumableRun`); a rerun into the same output with
   other arguments is refused unless `overwrite`;
5. evaluate masked-LM (for `clm`, next-token) loss and accuracy on the
   held-out documents, next to the accuracy of always predicting the most
   frequent training token;
6. save the model (`model.keras`), the vocabulary (`vocab.txt`), the
   metrics (`metrics.json`) and the learning curve (`learning_curve.png`,
   each step's training loss), and print a fill-in-the-blank demo (for
   `clm`, greedy continuations of held-out sentences).

The CLI reads the corpus into memory to split it; `pretraining_dataset`
itself streams.
"""

import ast
import codecs
import collections
import hashlib
import os
import random
import re
import sysconfig

import keras
import numpy as np

from kbert.backend_utils import set_random_seed
from kbert.models.presets import BART_PRESETS, ELMO_PRESETS, GPT2_PRESETS, PRESETS, T5_PRESETS, build
from kbert.jobs.bart_pretraining_run import OUTPUTS as BART_OUTPUTS
from kbert.jobs.bart_pretraining_run import check_bart_run, run_bart_pretraining
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.jobs.bilm_run import run_bilm
from kbert.jobs.extras import pretraining_packages, require_packages
from kbert.pretraining.electra_pretrainer import ElectraPretrainer
from kbert.pretraining.pretraining_dataset import (
    MIN_SEQUENCE_LENGTH,
    OBJECTIVES,
    corpus_sources,
    pretraining_dataset,
    read_documents,
)
from kbert.jobs.run_outputs import (
    DEMO_SENTENCES,
    HELD_OUT_EVERY,
    OUTPUTS,
    STEPS_PER_EPOCH,
    run_optimizer,
    save_run,
    saved_vocabulary,
)
from kbert.pretraining.span_bert_pretrainer import SpanBertPretrainer
from kbert.resumable_run import DEFAULT_SAVE_EVERY, ResumableRun
from kbert.tasks.causal_lm import CausalLM, next_token_weights

_SNIFFED_BYTES = 1 << 16
_SKIPPED_FOLDERS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# A run of minutes on a CPU is far from overfitting, and what limits it is how
# fast the loss falls: dropout only slows that (Geiping & Goldstein 2022,
# "Cramming"), and pre-LN blocks take a higher peak learning rate than BERT's
# post-LN ones. On the default job (bert_tiny, 32 x 64, JAX) they reach 0.20
# training masked-LM accuracy at step 1800 (peak 2e-3) where BERT's dropout and
# post-LN reach 0.18 (peak 1e-3; 3e-3 stalled), and 0.26 held-out at step 4800.
SHORT_RUN_OVERRIDES = {"dropout": 0.0, "normalize_first": True}
# The encoders' and GPT-2's objectives, ELMo's biLM (`kbert.jobs.bilm_run`) and BART's
# denoising (`kbert.jobs.bart_pretraining_run`).
RUN_OBJECTIVES = (*OBJECTIVES, "bilm", "bart")


def default_corpus():
    """English text every CPython install carries, as documents of one sentence per line.

    The interpreter's reference documentation (`pydoc_data.topics`, one
    document per topic) and the docstrings of the standard library's modules
    (one document per module, read with `ast`, nothing imported; test
    packages skipped): about 340,000 words. Hard-wrapped paragraphs are joined
    and split into sentences; doctest lines and rules are dropped.

    >>> len(default_corpus()) > 500
    True
    """
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)] + list(_standard_library_docstrings())
    return [document for document in map(_sentence_lines, texts) if document]


def _standard_library_docstrings():
    root = sysconfig.get_paths()["stdlib"]
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in _SKIPPED_FOLDERS and not f.startswith("."))
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            docstrings = [
                ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, _DOCUMENTED)
            ]
            yield "\n\n".join(d for d in docstrings if d)


def _sentence_lines(text):
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line for line in paragraph.splitlines() if not line.lstrip().startswith((">>>", "..."))]
        joined = " ".join(" ".join(lines).split())
        if joined and not set(joined) <= set("*=-^~ "):
            sentences.extend(s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"(])", joined) if s)
    return "\n".join(sentences)


def _split(documents):
    if not documents:
        raise ValueError("The corpus is empty: it holds no text.")
    if len(documents) < 2:
        raise ValueError(
            f"The corpus has {len(documents)} document(s); pretraining needs at least 2 "
            "(one is held out for evaluation). Separate documents with a blank line."
        )
    held_out = documents[HELD_OUT_EVERY - 1 :: HELD_OUT_EVERY] or documents[-1:]
    held = {id(d) for d in held_out}
    return [d for d in documents if id(d) not in held], held_out


def _pretrainer(objective, backbone):
    if objective == "clm":
        return CausalLM(backbone)
    if objective in ("mlm_nsp", "sop", "mlm"):
        pair = {"mlm_nsp": "nsp", "sop": "sop", "mlm": None}[objective]
        return BertPretrainer(backbone, pair_objective=pair)
    if objective == "span":
        return SpanBertPretrainer(backbone)
    # ELECTRA: a generator a quarter of the discriminator's width (ELECTRA-Small).
    hidden = max(backbone.hidden_dim // 4, 64)
    return ElectraPretrainer(
        backbone,
        generator_num_layers=backbone.num_layers,
        generator_hidden_dim=hidden,
        generator_num_heads=max(hidden // 64, 1),
        generator_intermediate_dim=4 * hidden,
    )


def _lm_metric(objective):
    """`(metric prefix, what it predicts)` of the objective's language-model loss."""
    return ("clm", "next-token") if objective == "clm" else ("mlm", "masked-LM")


def _targets(objective, batch):
    """`(target ids, weights)` as NumPy of a held-out batch: its masked tokens, or (clm) each next token."""
    if objective == "clm":
        weights = next_token_weights(np.asarray(batch["padding_mask"]))
        return np.asarray(batch["token_ids"])[:, 1:], keras.ops.convert_to_numpy(weights)
    _, y = batch
    return np.asarray(y["mask_ids"]), np.asarray(y["mask_weights"])


def _frequency_baseline(train_documents, held_out_dataset, tokenizer, objective):
    """Accuracy on the held-out targets of always predicting the most frequent training token."""
    counts = collections.Counter()
    for document in train_documents:
        for ids in tokenizer(document.splitlines()):
            counts.update(ids)
    most_frequent, _ = counts.most_common(1)[0]
    hits = total = 0.0
    for batch in held_out_dataset:
        targets, weights = _targets(objective, batch)
        hits += float(((targets == most_frequent) * weights).sum())
        total += float(weights.sum())
    return tokenizer.id_to_token(most_frequent), hits / max(total, 1.0)


def _demo_sentences(documents, rng):
    sentences = [s for d in documents for s in d.splitlines() if 6 <= len(s.split()) <= 25]
    rng.shuffle(sentences)
    return sentences


def _continuation_demo(model, tokenizer, documents, rng, log, new_tokens=12):
    """Print the model's greedy continuation of the first half of a few held-out sentences."""
    log(f"\nContinue the text (held-out sentences; {new_tokens} greedy tokens):")
    for sentence in _demo_sentences(documents, rng)[:DEMO_SENTENCES]:
        words = sentence.split()
        prompt, rest = " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])
        ids = [tokenizer.cls_id, *tokenizer([prompt])[0]]
        generated = model.generate(
            {"token_ids": np.array([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32")},
            max_new_tokens=new_tokens,
        )[0].tolist()
        end = generated.index(tokenizer.sep_id) if tokenizer.sep_id in generated else len(generated)
        log(f"  {prompt} ...")
        log(f"    text: {rest}    model: {tokenizer.detokenize(generated[:end])}")


def _demo(model, tokenizer, documents, sequence_length, rng, log):
    """Mask one word in a few held-out sentences and print the model's top guesses."""
    log("\nFill in the blank (held-out sentences; top 5 guesses):")
    for sentence in _demo_sentences(documents, rng)[:DEMO_SENTENCES]:
        words = sentence.split()
        candidates = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 2]
        if not candidates:
            continue
        index = rng.choice(candidates)
        before, answer, after = " ".join(words[:index]), words[index], " ".join(words[index + 1 :])
        left, right = tokenizer([before, after])
        ids = [tokenizer.cls_id, *left, tokenizer.mask_id, *right, tokenizer.sep_id]
        ids = ids[:sequence_length]
        position = len(left) + 1
        if position >= len(ids) - 1:
            continue
        x = {
            "token_ids": np.array([ids + [tokenizer.pad_id] * (sequence_length - len(ids))], "int32"),
            "segment_ids": np.zeros((1, sequence_length), "int32"),
            "padding_mask": np.array([[1] * len(ids) + [0] * (sequence_length - len(ids))], "int32"),
            "mask_positions": np.array([[position]], "int32"),
        }
        # A one-token span, for SpanBERT's boundary head; the other models ignore it.
        x.update(span_left=x["mask_positions"] - 1, span_right=x["mask_positions"] + 1,
                 span_offsets=0 * x["mask_positions"])
        logits = keras.ops.convert_to_numpy(model(x)["mlm_logits"])[0, 0]
        top = np.argsort(-logits)[:5]
        guesses = ", ".join(tokenizer.id_to_token(int(t)) for t in top)
        log(f"  {before} [MASK] {after}")
        log(f"    answer: {answer.lower()}    model: {guesses}")


def _check_run(model, objective, steps, batch_size, sequence_length, learning_rate):
    if objective not in RUN_OBJECTIVES:
        raise ValueError(f"Unknown objective {objective!r}; expected one of {', '.join(RUN_OBJECTIVES)}.")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch size must be positive (received {steps}, {batch_size}).")
    if not 0 < learning_rate < float("inf"):
        raise ValueError(f"The learning rate must be positive; received {learning_rate}.")
    if objective == "bilm" or model in ELMO_PRESETS:
        _check_bilm_run(model, objective, sequence_length)
        return
    if objective == "bart":
        return check_bart_run(model, sequence_length)
    if model in T5_PRESETS or model in BART_PRESETS:
        raise ValueError(
            f"kbert pretrain trains encoders and decoders; {model} is an encoder-decoder (pretrain "
            "BART with --objective bart, T5 with kbert.pretraining.SpanCorruption and "
            "kbert.tasks.Seq2SeqLM)."
        )
    if model not in PRESETS and model not in GPT2_PRESETS:
        build(model)  # raises the unknown-model error, with close matches
    if (objective == "clm") != (model in GPT2_PRESETS):
        raise ValueError(
            f"--objective clm trains the decoders ({', '.join(GPT2_PRESETS)}) and they train with "
            f"clm only; received --model {model} --objective {objective}."
        )
    table = GPT2_PRESETS if model in GPT2_PRESETS else PRESETS
    usable = table[model]["max_positions"] - table[model].get("position_offset", 0)
    if not MIN_SEQUENCE_LENGTH <= sequence_length <= usable:
        raise ValueError(f"Sequence length {sequence_length} is outside [{MIN_SEQUENCE_LENGTH}, {usable}]: "
                         f"at least the pair packing's minimum, at most the positions of {model}.")


def _check_bilm_run(model, objective, sequence_length):
    """ELMo models train with the biLM objective, and only they do."""
    if objective != "bilm" or model not in ELMO_PRESETS:
        raise ValueError(f"--objective bilm trains the ELMo models ({', '.join(ELMO_PRESETS)}) and they "
                         f"train with it alone; received --model {model} --objective {objective}.")
    if sequence_length < MIN_SEQUENCE_LENGTH:
        raise ValueError(f"Sequence length {sequence_length} is under {MIN_SEQUENCE_LENGTH}.")


def _corpus_record(corpus):
    """The corpus as a rerun must give it again: absolute file paths, digests of document strings.

    Raises `ValueError` for a file that is not UTF-8 text (an image, random
    bytes), naming it.
    """
    record = []
    for kind, source in corpus_sources(corpus):
        if kind == "text":
            record.append(hashlib.sha256(source.encode("utf-8")).hexdigest()[:16])
            continue
        with open(source, "rb") as f:
            head = f.read(_SNIFFED_BYTES)
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head)  # a character cut at the end is fine
        except UnicodeDecodeError:
            head = b"\0"
        if b"\0" in head:
            raise ValueError(f"Corpus file {source} is not UTF-8 text (it holds binary data); give text files.")
        record.append(os.path.abspath(source))
    return record


def _tokenizer(output, train_documents, vocabulary_size, log):
    """The WordPiece tokenizer of `output/vocab.txt`, learned from `train_documents` if absent."""
    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    path = saved_vocabulary(output, learn_word_piece_vocabulary, train_documents, vocabulary_size,
                            "token WordPiece", log)
    return WordPieceTokenizer(path, lowercase=True)


def _compiled_pretrainer(model, objective, tokenizer, steps, learning_rate):
    """`(backbone, pretrainer)`: the model sized to the vocabulary, compiled (AdamW, warm-up)."""
    if objective == "clm":  # GPT-2 is pre-LN already; its text ends at [SEP]
        options = dict(dropout=SHORT_RUN_OVERRIDES["dropout"], end_id=tokenizer.sep_id)
    else:  # only NSP and SOP read the pooled output; elsewhere a pooler would get no gradient
        options = dict(SHORT_RUN_OVERRIDES, use_pooler=objective in ("mlm_nsp", "sop"))
    backbone = build(model, vocabulary_size=tokenizer.vocabulary_size, **options)
    pretrainer = _pretrainer(objective, backbone)
    pretrainer.compile(optimizer=run_optimizer(steps, learning_rate))
    return backbone, pretrainer


def _title(metrics):
    """The learning curve's title: the run and its held-out accuracy beside the frequency baseline."""
    metric, predicted = _lm_metric(metrics["objective"])
    return (f"{metrics['model']}, {metrics['objective']}: held-out {predicted} accuracy "
            f"{metrics[f'held_out_{metric}_accuracy']:.3f} "
            f"(most frequent token {metrics['most_frequent_token_accuracy']:.3f})")


def held_out_dataset(held_out_documents, seed, data):
    """`(dataset, batches)`: the held-out documents masked once, cached, and their batch count."""
    held_out = pretraining_dataset(held_out_documents, seed=seed + 1, masking="static",
                                   dupe_factor=1, repeat=False, **data)
    held_out = held_out.cache()
    batches = sum(1 for _ in held_out)  # evaluate warns on an unsized dataset
    if not batches:
        raise ValueError(
            f"The held-out documents (every {HELD_OUT_EVERY}th) fill no batch of "
            f"{data['batch_size']} x {data['sequence_length']}; give a larger corpus or a "
            "smaller batch."
        )
    return held_out, batches


def _evaluation(pretrainer, held_out, batches, train_documents, tokenizer, objective, log):
    """Held-out masked-LM (or next-token) loss and accuracy, next to the most-frequent-token baseline."""
    results = pretrainer.evaluate(held_out, steps=batches, return_dict=True, verbose=0)
    frequent_token, baseline = _frequency_baseline(train_documents, held_out, tokenizer, objective)
    metric, predicted = _lm_metric(objective)
    loss, accuracy = float(results[f"{metric}_loss"]), float(results[f"{metric}_accuracy"])
    evaluation = {
        f"held_out_{metric}_loss": loss,
        f"held_out_{metric}_accuracy": accuracy,
        "most_frequent_token": frequent_token,
        "most_frequent_token_accuracy": baseline,
    }
    log(f"\nHeld-out {predicted}: loss {loss:.3f}, accuracy {accuracy:.3f} (always predicting "
        f"{frequent_token!r}: {baseline:.3f})")
    return evaluation


def run_pretraining(
    corpus=None,
    output="runs/pretrain",
    model="bert_tiny",
    objective="mlm_nsp",
    steps=4800,
    batch_size=32,
    sequence_length=64,
    vocabulary_size=8000,
    learning_rate=2e-3,
    seed=0,
    save_every=DEFAULT_SAVE_EVERY,
    overwrite=False,
    callbacks=(),
    log=print,
):
    """Pretrain, evaluate and save; return the metrics dict. See the module docstring.

    `corpus` is what `read_documents` takes (files, folders); `None` uses
    `default_corpus()`. A checkpoint is saved every `save_every` steps and on
    SIGINT or SIGTERM; a rerun with the same arguments resumes from it, one
    with other arguments into the same `output` is refused unless
    `overwrite`. `callbacks` are extra Keras callbacks for `fit` (for example
    `keras.callbacks.TensorBoard`); `log` prints the progress lines.
    Raises `ValueError` for bad input (unknown model or objective, missing
    or binary corpus file, empty corpus, sequence length over the model's
    positions, an optional package the objective needs that is not installed,
    an output that is a file or cannot be written, other arguments than the
    output's run), `FloatingPointError` for a NaN loss.
    `objective="bart"` pretrains a BART (`kbert.jobs.bart_pretraining_run`).

    Example: `run_pretraining(model="bert_tiny", steps=20, output="runs/tiny")`
    returns `{"held_out_mlm_accuracy": ..., "most_frequent_token_accuracy": ..., ...}`.
    """
    _check_run(model, objective, steps, batch_size, sequence_length, learning_rate)
    require_packages(pretraining_packages(objective), f"--objective {objective}")
    arguments = dict(corpus=_corpus_record(corpus) if corpus else None, model=model,
                     objective=objective, steps=steps, batch_size=batch_size, sequence_length=sequence_length,
                     vocabulary_size=vocabulary_size, learning_rate=learning_rate, seed=seed,
                     backend=keras.backend.backend())
    run = ResumableRun(output, arguments, steps, BART_OUTPUTS if objective == "bart" else OUTPUTS,
                       save_every, overwrite, log)
    set_random_seed(seed)
    documents = default_corpus() if not corpus else ["\n".join(d) for d in read_documents(corpus)]
    if objective == "bart":
        return run_bart_pretraining(run, documents, _split, output, arguments, callbacks, log)
    train_documents, held_out_documents = _split(documents)
    if objective == "bilm":
        return run_bilm(run, arguments, train_documents, held_out_documents, callbacks, log)
    tokenizer = _tokenizer(output, train_documents, vocabulary_size, log)
    backbone, pretrainer = _compiled_pretrainer(model, objective, tokenizer, steps, learning_rate)

    data = dict(tokenizer=tokenizer, objective=objective, sequence_length=sequence_length,
                batch_size=batch_size)
    train = pretraining_dataset(train_documents, seed=seed, **data)
    held_out, held_out_batches = held_out_dataset(held_out_documents, seed, data)
    log(f"Pretraining {model} ({backbone.count_params():,} parameters) with {objective} "
        f"for {steps} steps of {batch_size} x {sequence_length} on {keras.backend.backend()} ...")
    run.fit(pretrainer, train, min(STEPS_PER_EPOCH, steps), callbacks, verbose=1 if log is print else 2)

    metrics = {
        "backend": keras.backend.backend(),
        "model": model,
        "objective": objective,
        "steps": steps,
        "batch_size": batch_size,
        "sequence_length": sequence_length,
        "vocabulary_size": tokenizer.vocabulary_size,
        **_evaluation(pretrainer, held_out, held_out_batches, train_documents, tokenizer, objective,
                      log),
        "wall_time_seconds": round(run.elapsed_seconds(), 1),
    }
    save_run(run, pretrainer, metrics, _title(metrics), OUTPUTS, log)
    if objective == "clm":
        _continuation_demo(pretrainer, tokenizer, held_out_documents, random.Random(seed), log)
    else:
        _demo(pretrainer, tokenizer, held_out_documents, sequence_length, random.Random(seed), log)
    return metrics


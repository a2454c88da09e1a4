"""The `kbert` command (also `python -m kbert`).

    kbert pretrain [--objective mlm_nsp] [--corpus PATH ...] [--steps 3000] ...
    kbert finetune [--task classify --checkpoint PATH --train FILE --validation FILE] ...
    kbert tour [--model bert_base] [--sentence TEXT]
    kbert predict --model PATH (--text TEXT [--text-pair TEXT] [--question Q] | --input FILE.jsonl) [--top-k K]
        [--batch-size 32]
    kbert export --model PATH --format saved_model|onnx|huggingface --output DIR

`pretrain` is the main job (see `kbert.jobs.pretraining_run`): with no
arguments it learns a vocabulary from the interpreter's bundled documentation
and the BBC News training articles (`default_corpus`), pretrains a small BERT,
evaluates it on held-out text, saves it and shows a fill-in-the-blank demo.
`finetune` fine-tunes a checkpoint on a task (see `kbert.jobs.finetuning_run`);
with no data arguments it fine-tunes the model `pretrain` left, beside the same
model from random init, on BBC News topics. `predict` runs a saved model on text and prints one JSON object per
input (see `kbert.jobs.predict_run`); `export` writes it for serving, a
SavedModel that reads strings, ONNX or a Hugging Face folder (see
`kbert.jobs.export_run`). `tour` builds a model of any family and runs it on one sentence (see `kbert.jobs.tour`).
`--backend` selects the Keras backend (the process re-starts itself with
`KERAS_BACKEND` set when needed). `pretrain` and `finetune` save their resume
state (`resume_state.npz`; a "checkpoint" is the model a job starts from)
every `--save-every` steps and on Ctrl-C or SIGTERM: rerunning the same command
resumes at the exact step; other arguments into the same `--output` are refused
unless `--overwrite`. `--distribute` trains them over several devices and
processes (`kbert.distribute.DistributedTraining`): `torchrun --nproc-per-node
N -m kbert pretrain ...` on PyTorch, `KERAS_DISTRIBUTION_*` on JAX. Bad input,
and a NaN loss, end with a one-line error and exit status 2.
"""

import argparse
import os
import sys

BACKENDS = ("tensorflow", "jax", "torch")
# `kbert.tasks.encoder_features.FEATURES`, spelled here: the parser imports no Keras before --backend.
FEATURES = ("sequence_output", "scalar_mix", "scalar_mix_layer_norm", "last_four")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# `kbert.jobs.objective_catalog.OBJECTIVES`, named here with a note for --help (no Keras before --backend).
OBJECTIVES = {
    "mlm_nsp": "BERT",
    "mlm": "RoBERTa",
    "sop": "ALBERT",
    "span": "SpanBERT",
    "electra": "",
    "structbert": "StructBERT: word and sentence order",
    "plm": "XLNet's permutation LM: with --model xlnet_tiny ...",
    "clm": "GPT: with --model gpt2_tiny, gpt2_base ...",
    "bilm": "ELMo: with --model elmo_small or elmo_original",
    "bart": "denoising; with --model bart_tiny or another BART",
    "span_corruption": "T5: with --model t5_tiny, t5_small ...",
    "prefix_lm": "T5", "bert_style": "T5", "deshuffle": "T5", "mass": "T5", "drop_tokens": "T5",
}


def _parser():
    parser = argparse.ArgumentParser(prog="kbert", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tour = commands.add_parser("tour", help="build a model and run it on one sentence (a decoder or "
                                            "encoder-decoder also generates a few tokens)")
    tour.add_argument("--model", default="bert_base", help="a builder name of any family (default bert_base)")
    tour.add_argument(
        "--sentence",
        default="The quick brown fox jumps over the lazy dog.",
        help="the sentence to encode",
    )
    tour.add_argument("--backend", choices=BACKENDS, help="Keras backend for this run")

    pretrain = commands.add_parser("pretrain", help="pretrain a model on a text corpus (the main job)")
    pretrain.add_argument("--objective", default="mlm_nsp",
                          help=", ".join(f"{name} ({note})" if note else name for name, note in OBJECTIVES.items()))
    pretrain.add_argument("--corpus", nargs="+",
                          help="text files or folders (blank line = new document); "
                               "default: the interpreter's bundled documentation and the BBC News "
                               "training articles")
    pretrain.add_argument("--model", default="bert_tiny", help="a builder name (default bert_tiny)")
    pretrain.add_argument("--steps", type=int, default=3000)
    pretrain.add_argument("--batch-size", type=int, default=32)
    pretrain.add_argument("--sequence-length", type=int, default=64)
    pretrain.add_argument("--vocabulary-size", type=int, default=8000)
    pretrain.add_argument(
        "--learning-rate", type=float, default=2e-3, help="peak, after a warm-up of a tenth of the steps"
    )
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument("--output", default="runs/pretrain",
                          help="folder for the model, vocabulary, metrics and the resume state")
    _resume_arguments(pretrain)
    _distribute_arguments(pretrain)
    pretrain.add_argument("--backend", choices=BACKENDS, help="Keras backend for this run")
    _finetune_parser(commands)
    _predict_parser(commands)
    export = commands.add_parser("export", help="write a saved model for serving: a SavedModel that reads strings "
                                                "(tensorflow backend), ONNX (torch backend) or a Hugging Face folder "
                                                "(any backend)")
    export.add_argument("--model", required=True, help="what predict --model takes")
    export.add_argument("--format", required=True, choices=("saved_model", "onnx", "huggingface"))
    export.add_argument("--output", required=True, help="a new folder")
    export.add_argument("--backend", choices=BACKENDS, help="Keras backend for this run")
    return parser


def _predict_parser(commands):
    predict = commands.add_parser(
        "predict", help="run a saved model on text: one JSON object per input on stdout")
    predict.add_argument("--model", required=True,
                         help="a kbert .keras file, a run folder of kbert finetune or pretrain, or a Hugging "
                              "Face folder with a task head")
    predict.add_argument("--text", help="the text (the context, for question answering)")
    predict.add_argument("--text-pair", help="the second text, for a sentence-pair classifier")
    predict.add_argument("--question", help="the question, for question answering")
    predict.add_argument("--input", help="a JSONL file: one object a line with text (and text_pair, "
                                         "question or choices)")
    predict.add_argument("--top-k", type=int, default=5, help="fill-mask: tokens per mask (default 5)")
    predict.add_argument("--max-new-tokens", type=int, default=32, help="generation: new tokens (default 32)")
    predict.add_argument("--batch-size", type=int, default=32,
                         help="texts per model call, batched by length (default 32)")
    predict.add_argument("--backend", choices=BACKENDS, help="Keras backend for this run")


def _finetune_parser(commands):
    finetune = commands.add_parser(
        "finetune", help="fine-tune a checkpoint on a task; with no data arguments, on BBC News topics")
    finetune.add_argument("--task", choices=("classify", "regress", "tag", "qa", "choice", "text"),
                          help="classify/regress: CSV, TSV or JSONL with text, [text_pair,] label; "
                               "tag: CoNLL-2003 columns; qa: SQuAD JSON; choice: SWAG CSV; "
                               "text (T5): CSV, TSV or JSONL with source, target")
    finetune.add_argument("--checkpoint", help="a Hugging Face folder, a kbert model.keras with its "
                                               "vocab.txt beside it, or a builder name (random init)")
    finetune.add_argument("--train", help="the training file")
    finetune.add_argument("--validation", help="the validation file")
    finetune.add_argument("--vocabulary", help="vocab.txt or spiece.model, if not beside the checkpoint")
    # The BBC News demo's own recipe (kbert.jobs.finetuning_run.DEMO_*), spelled here: no Keras before --backend.
    finetune.add_argument("--epochs", type=int, help="default 3 (the BBC News demo: 3)")
    finetune.add_argument("--batch-size", type=int, default=32)
    finetune.add_argument("--learning-rate", type=float,
                          help="default 5e-5 (BERT's; the BBC News demo's small model: 5e-4)")
    finetune.add_argument("--sequence-length", type=int,
                          help="default 128 (the BBC News demo: 128)")
    finetune.add_argument("--buckets", choices=("on", "off"), default="on",
                          help="on: batch texts of similar length, each batch padded to the smallest of a few "
                               "lengths (16, 32, 64, ... up to --sequence-length); off: pad every batch to "
                               "--sequence-length")
    finetune.add_argument("--seed", type=int, default=0)
    finetune.add_argument("--features", choices=FEATURES, default="sequence_output",
                          help="sequence_output: fine-tune the whole encoder; scalar_mix (ELMo), "
                               "scalar_mix_layer_norm or last_four (BERT's feature-based NER): train only "
                               "a mix and the head on the frozen encoder")
    finetune.add_argument("--output", default="runs/finetune",
                          help="folder for metrics.json, predictions.jsonl, model.keras and the resume state")
    _resume_arguments(finetune)
    _distribute_arguments(finetune)
    finetune.add_argument("--pretrained",
                          help="with no data arguments: the folder `kbert pretrain` wrote "
                               "(default runs/pretrain)")
    finetune.add_argument("--backend", choices=BACKENDS, help="Keras backend for this run")


def _distribute_arguments(command):
    command.add_argument("--distribute", choices=("none", "data", "model"),
                         help="none: one device; data: data-parallel over every device and process (the default "
                              "when there are several: JAX devices or KERAS_DISTRIBUTION_* processes, torchrun "
                              "processes, TensorFlow GPUs); model: Megatron model-parallel (JAX); --batch-size "
                              "is the global batch")
    command.add_argument("--model-parallel", type=int, default=1, metavar="N",
                         help="with --distribute model: devices each model is split over (default 1)")


def _resume_arguments(command):
    command.add_argument("--save-every", type=int, metavar="STEPS",
                         help="save the resume state every STEPS steps (and on Ctrl-C or SIGTERM); rerunning the same "
                              "command resumes at the exact step (default 50)")
    command.add_argument("--overwrite", action="store_true",
                         help="start afresh in an --output that holds a run with other arguments")


def _resume_options(args):
    """`--save-every` when given (else the run's own default), `--overwrite`, `--distribute`, `--model-parallel`."""
    options = {"overwrite": args.overwrite, "distribute": args.distribute, "model_parallel": args.model_parallel}
    if args.save_every is not None:
        options["save_every"] = args.save_every
    return options


def _use_backend(backend, argv):
    """Re-run this command under `backend` if Keras was loaded with another one."""
    import keras

    if backend is None or keras.backend.backend() == backend:
        return
    env = dict(os.environ, KERAS_BACKEND=backend)
    os.execve(sys.executable, [sys.executable, "-m", "kbert", *argv], env)


def tour(args):
    from kbert.jobs.tour import run_tour

    try:
        run_tour(args.model, args.sentence)
    except ValueError as error:
        raise SystemExit(f"kbert: {error}") from None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    _use_backend(args.backend, argv)
    if args.command == "tour":
        tour(args)
    elif args.command == "pretrain":
        pretrain(args)
    elif args.command == "finetune":
        finetune(args)
    elif args.command == "predict":
        _one_line_errors(lambda: _predict(args))
    elif args.command == "export":
        from kbert.jobs.export_run import run_export

        _one_line_errors(lambda: run_export(args.model, args.format, args.output))
    return 0


def _one_line_errors(run):
    """Run `run()`; a bad-input error ends the command with one line and exit status 2."""
    try:
        return run()
    except (ValueError, FileNotFoundError, FloatingPointError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"kbert: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def pretrain(args):
    from kbert.jobs.pretraining_run import run_pretraining

    _one_line_errors(lambda: run_pretraining(
        corpus=args.corpus,
        output=args.output,
        model=args.model,
        objective=args.objective,
        steps=args.steps,
        batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        vocabulary_size=args.vocabulary_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        **_resume_options(args),
    ))


def finetune(args):
    _one_line_errors(lambda: _finetune(args))


def _finetune(args):
    """The BBC News demo with no data arguments; otherwise a fine-tune of `--checkpoint` on the files."""
    from kbert.jobs import finetuning_run

    options = dict(batch_size=args.batch_size, seed=args.seed, features=args.features,
                   buckets=args.buckets == "on", **_resume_options(args))
    for name in ("epochs", "learning_rate", "sequence_length"):  # else the run's default: the demo has its own
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    data = {"--task": args.task, "--checkpoint": args.checkpoint, "--train": args.train,
            "--validation": args.validation, "--vocabulary": args.vocabulary}
    given = [name for name, value in data.items() if value]
    if not given:
        return finetuning_run.run_bbc_news_comparison(args.pretrained or "runs/pretrain", args.output, **options)
    if args.pretrained:
        raise ValueError(f"--pretrained is for the BBC News demo, which takes no {given[0]}.")
    missing = [name for name, value in data.items() if not value and name != "--vocabulary"]
    if missing:
        raise ValueError(f"finetune needs {', '.join(missing)} too (or no data arguments, for the BBC News demo).")
    return finetuning_run.run_finetuning(args.task, args.checkpoint, args.train, args.validation,
                                         vocabulary=args.vocabulary, output=args.output, **options)


def _predict(args):
    """`kbert predict`: the inputs from --text (and --text-pair, --question) or from --input."""
    from kbert.jobs.predict_run import run_predict

    if args.question is not None and args.text is None and args.input is None:
        raise ValueError("--question needs a context: give the passage to answer from as --text.")
    if (args.text is None) == (args.input is None):
        raise ValueError("predict needs --text or --input (one of them).")
    if args.input is not None:
        if args.text_pair or args.question:
            raise ValueError("--text-pair and --question go with --text; put them in the --input lines.")
        inputs = args.input
    elif not args.text.strip():
        raise ValueError("--text is empty.")
    else:
        inputs = [{"text": args.text, "text_pair": args.text_pair, "question": args.question}]
    run_predict(args.model, inputs, top_k=args.top_k, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)

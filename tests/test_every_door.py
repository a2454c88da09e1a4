"""Every builder family through every door that applies to it, at a tiny size.

A test id names its pair, `test_door[<family>-<door>]`. The families are
kbert's builder tables (`kbert.models.presets`), one preset each, shrunk
here to a tiny size (`TINY`) with everything else of the family kept
(position offset, segments, factorized or shared layers, sparse attention,
relative positions, the character CNN):

| door                          | families                                   | not for (why)                                   |
|-------------------------------|--------------------------------------------|-------------------------------------------------|
| tour                          | all                                        |                                                 |
| from_huggingface              | encoders, t5, gpt2, bart, xlnet (elsewhere)| elmo: no Hugging Face model, no converter       |
| with_internals                | encoders, t5                               | gpt2, bart, elmo, xlnet: the method is the      |
|                               |                                            | encoders' and T5's (hidden states, attention)   |
| keras_file (save, load)       | all                                        |                                                 |
| prune_heads                   | encoders, t5; gpt2, bart, elmo, xlnet      |                                                 |
|                               | refused                                    |                                                 |
| pretrain_<objective>          | the objective's family; t5 with mlm refused|                                                 |
| finetune_<task>               | encoders: classify regress tag qa choice;  |                                                 |
|                               | xlnet: classify tag; t5: text; gpt2, bart, |                                                 |
|                               | elmo, xlnet (qa, choice) refused           |                                                 |
| generate                      | t5, gpt2, bart (elsewhere); xlnet refused  | encoders, elmo: no decoder                      |
| predict (`kbert predict`)     | encoders (a classifier); t5, gpt2, bart    | elmo: no task reads text                        |
|                               | (elsewhere)                                |                                                 |
| export (`kbert export`)       | encoders (a classifier: saved_model on     | elmo: no task reads text                        |
|                               | TensorFlow, onnx on PyTorch but refused    |                                                 |
|                               | for bigbird, longformer; both refused on   |                                                 |
|                               | JAX); t5, gpt2, bart refused               |                                                 |
| to_huggingface                | all but elmo (loaded by transformers with  | elmo: refused (no transformers class)           |
|                               | no missing key; outputs in                 |                                                 |
|                               | tests/checkpoints/test_huggingface_export) |                                                 |
| to_keras_hub                  | roberta, albert, distilbert, gpt2, bart,   | elmo: no KerasHub backbone                      |
|                               | t5; bert, electra (exact GELU), xlnet,     |                                                 |
|                               | bigbird, longformer refused                |                                                 |
| pretrain_distribute_<mode>    | bert: data, model (elsewhere)              | one family stands for the encoders              |
| finetune_distribute_<mode>    | bert: data; t5: model (elsewhere)          |                                                 |
| example_<script>              | the families each script runs              |                                                 |

`ELSEWHERE` names, for each pair an existing test covers exactly, that test
(whose presence is checked here); the other pairs run here. A CLI door
runs in this process through `kbert.cli.main`: it must return 0, or, for a
refused pair, stop with a non-zero status and one line `kbert: ...`. The
examples run with their smallest settings (`--smoke` or tiny
arguments): `backend_comparison` (a process per backend itself) and
`tpu_fit` in a subprocess with a time limit, the others in this process as
`__main__`.

Each pair runs in one backend's run of the suite, by a fixed rotation
(`_rotation`: the pairs in the table's order take the slots of
`conftest.ROTATION` in turn: TensorFlow, PyTorch, JAX, PyTorch), so PyTorch's
run, which compiles nothing, takes half of the matrix, and a failure
reproduces on the backend that found it; `PINNED` doors are one backend's
(the examples, whole programs, run in the PyTorch run; `tpu_fit` is
TensorFlow's). The backend-dependent contracts behind the
doors (numbers against references, saving, compiling, exporting) run on
every backend in their own tests and harnesses. `KBERT_EVERY_DOOR=all` runs
every pair in every backend's run.
"""

import ast
import json
import os
import pathlib
import runpy
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import BACKENDS, ROTATION
from finetuning_data import VOCABULARY, write_task_files, write_vocabulary
from tasks.task_testing import FAMILIES as ENCODER_FAMILIES

import kbert
from kbert import cli
from kbert.analysis import prune_heads
from kbert.jobs.tour import model_inputs
from kbert.models import presets

ROOT = pathlib.Path(__file__).resolve().parents[1]
SENTENCE = "The quick brown fox jumps over the lazy dog."
EXAMPLE_TIMEOUT_S = 300

# family -> the preset that stands for it: the encoders' (tests/tasks/task_testing.py), then the others.
FAMILIES = {**ENCODER_FAMILIES, "t5": "t5_small", "gpt2": "gpt2_tiny", "bart": "bart_tiny", "elmo": "elmo_small",
            "xlnet": "xlnet_tiny"}
ENCODERS = tuple(ENCODER_FAMILIES)
_SMALL = dict(num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64)
# What each preset is shrunk to here (the rest of its table entry stays).
TINY = {
    "bert": _SMALL,
    "roberta": _SMALL,
    "albert": dict(_SMALL, embedding_dim=16),
    "electra": dict(_SMALL, embedding_dim=16),
    "distilbert": _SMALL,
    "bigbird": dict(_SMALL, max_positions=64, attention_kwargs={"block_size": 4, "num_random_blocks": 1}),
    "longformer": dict(_SMALL, max_positions=66, attention_kwargs={"window": 4}),
    "t5": dict(_SMALL, key_dim=16),
    "gpt2": _SMALL,
    "bart": _SMALL,
    "elmo": dict(hidden_dim=16, cell_dim=32, filters=((1, 8), (2, 8))),
    "xlnet": _SMALL,
}
# The objective each family pretrains with (`kbert pretrain --objective`).
OBJECTIVES = {
    "bert": ("mlm_nsp", "span", "structbert"),
    "roberta": ("mlm",),
    "albert": ("sop",),
    "electra": ("electra",),
    "distilbert": ("mlm",),
    "bigbird": ("mlm",),
    "longformer": ("mlm",),
    "gpt2": ("clm",),
    "elmo": ("bilm",),
    "bart": ("bart",),
    "xlnet": ("plm",),
    "t5": ("span_corruption", "prefix_lm", "bert_style", "deshuffle", "mass", "drop_tokens"),
}
ENCODER_TASKS = ("classify", "regress", "tag", "qa", "choice")
XLNET_TASKS = ("classify", "tag")  # XLNet's layout (kbert.text.last_token_layout); qa and choice are the encoders'
# Refused pairs: the family and the tasks it cannot fine-tune (each a one-line error).
REFUSED_FINETUNING = {"gpt2": ("classify",), "bart": ("text",), "elmo": ("tag",), "xlnet": ("qa", "choice")}
# script -> (the families it runs, its smallest arguments; {output} is a fresh folder, {backend} this one)
EXAMPLES = {
    "attention_patterns": (("bigbird", "longformer"), ["--length", "64", "--block-size", "8", "--window", "8",
                                                       "--output", "{output}/patterns.png"]),
    "backend_comparison": (("bert", "bigbird", "t5"), ["--backends", "{backend}", "--smoke", "--output",
                                                       "{output}"]),
    "bart_denoising": (("bart",), ["--smoke", "--output", "{output}"]),
    "gpt2_pretrain_and_sample": (("gpt2",), ["--smoke", "--output", "{output}"]),
    "long_document_classification": (("bert", "bigbird", "longformer"), ["--smoke"]),
    "masking_strategies": (("bert",), ["--smoke"]),
    # the program end to end on two objectives' rows and from scratch; every objective pretrains through its own
    # door
    "objectives_compared": (("bert", "xlnet"), ["--smoke", "--only", "mlm", "plm", "scratch", "--runs",
                                                "{output}/runs"]),
    "t5_objectives": (("t5",), ["--smoke", "--output", "{output}"]),
    # the program end to end with a bert_tiny teacher on 10 articles, a 2-step pretraining beside (the default
    # teacher, all-MiniLM-L6-v2, is a 22M-parameter fine-tuning: examples/results/task_distillation.md)
    "task_distillation": (("bert",), ["--smoke", "--teacher", "bert_tiny", "--pretrained", "{output}/pretrain",
                                      "--output", "{output}/runs"]),
    "t5_span_corruption": (("t5",), ["--smoke"]),
    "tpu_fit": (("bert",), ["--model", "bert_tiny", "--num-layers", "1", "--steps", "2", "--batch-size", "4",
                            "--sequence-length", "32", "--documents", "40", "--vocabulary-size", "1000",
                            "--output", "{output}"]),
}

# The examples run as a subprocess (a whole program from a fresh interpreter): the one that starts a process
# per backend itself, and TensorFlow's TPU program (its strategy, set up per process, took 86 s inside the
# suite's process, 23 s alone); the others run in the test's process (`_example`).
SUBPROCESS_EXAMPLES = ("backend_comparison", "tpu_fit")

# Doors that run in one backend's run only. The examples are whole programs (a subprocess each, the
# suite's longest doors): they stay in the PyTorch run, the shortest of the three, as before the
# rotation; `tpu_fit` is TensorFlow's.
PINNED = {**{f"example_{script}": "torch" for script in EXAMPLES}, "example_tpu_fit": "tensorflow"}

_CONVERTERS = "tests/checkpoints/test_bert_converter.py::test_outputs_match_transformers"
_LONG_DOCUMENTS = "tests/checkpoints/test_long_document_converter.py"
_FINETUNING = "tests/jobs/test_finetuning_run.py::test_every_task_fine_tunes_scores_and_saves"
_DISTRIBUTED = "tests/jobs/test_distributed_runs.py"
# (family, door) -> the test that covers it exactly.
ELSEWHERE = {
    **{(family, "from_huggingface"): _CONVERTERS for family in ("bert", "roberta", "albert", "electra",
                                                                 "distilbert")},
    ("bigbird", "from_huggingface"):
        f"{_LONG_DOCUMENTS}::test_big_bird_matches_transformers_where_it_runs_full_attention",
    ("longformer", "from_huggingface"): f"{_LONG_DOCUMENTS}::test_longformer_matches_transformers",
    ("t5", "from_huggingface"): "tests/checkpoints/test_t5_converter.py::test_logits_match_transformers",
    ("gpt2", "from_huggingface"):
        "tests/checkpoints/test_gpt2_converter.py::test_logits_match_transformers_on_a_left_padded_batch",
    ("bart", "from_huggingface"): "tests/checkpoints/test_bart_converter.py::test_logits_match_transformers",
    ("xlnet", "from_huggingface"):
        "tests/checkpoints/test_xlnet_converter.py::test_content_stream_matches_on_a_left_padded_batch",
    ("t5", "generate"): "tests/checkpoints/test_t5_converter.py::test_greedy_matches_transformers_generate",
    ("gpt2", "generate"): "tests/checkpoints/test_gpt2_converter.py::test_greedy_matches_transformers_generate",
    ("bart", "generate"): "tests/checkpoints/test_bart_converter.py::test_greedy_matches_transformers_generate",
    ("bert", "pretrain_mlm_nsp"): "tests/jobs/test_pretraining_run.py::test_short_run_evaluates_saves_and_demos",
    ("bert", "pretrain_span"): "tests/jobs/test_pretraining_run.py::test_short_run_evaluates_saves_and_demos",
    ("bert", "pretrain_structbert"): "tests/jobs/test_pretraining_run.py::test_structbert_and_permutation_lm_runs",
    ("gpt2", "pretrain_clm"): "tests/jobs/test_pretraining_run.py::test_a_short_clm_run_through_the_command",
    ("elmo", "pretrain_bilm"): "tests/jobs/test_bilm_run.py::test_a_tiny_bilm_run_evaluates_saves_and_demos",
    ("bart", "pretrain_bart"): "tests/jobs/test_bart_pretraining_run.py::test_short_bart_run_through_the_command",
    ("t5", "pretrain_span_corruption"):
        "tests/jobs/test_t5_pretraining_run.py::test_a_span_corruption_run_through_the_command",
    ("t5", "pretrain_deshuffle"):
        "tests/jobs/test_t5_pretraining_run.py::test_an_interrupted_run_resumes_and_ends_as_an_uninterrupted_one",
    **{("t5", f"pretrain_{objective}"): "tests/jobs/test_t5_pretraining_run.py::test_every_t5_objective_trains_the_t5_models"
       for objective in ("prefix_lm", "bert_style", "mass", "drop_tokens")},
    ("bert", "finetune_classify"): "tests/test_cli.py::test_finetune_runs_with_the_options_given",
    **{("bert", f"finetune_{task}"): _FINETUNING for task in ("regress", "tag", "qa", "choice")},
    ("t5", "finetune_text"):
        "tests/jobs/test_finetuning_run.py::test_t5_learns_text_to_text_and_is_scored_on_what_it_generates",
    **{(family, "predict"): "tests/jobs/test_predict_run.py::test_a_hugging_face_generator_writes_text"
       for family in ("t5", "gpt2", "bart")},
    ("bert", "pretrain_distribute_data"): f"{_DISTRIBUTED}::test_two_jax_processes_lose_one_resume_and_end_as_one_process",
    ("bert", "pretrain_distribute_model"): f"{_DISTRIBUTED}::test_two_jax_devices_pretrain_as_one",
    ("bert", "finetune_distribute_data"): f"{_DISTRIBUTED}::test_two_jax_devices_finetune_as_one",
    ("t5", "finetune_distribute_model"): f"{_DISTRIBUTED}::test_two_jax_devices_finetune_as_one",
}
GENERATORS = {"t5": "Seq2SeqLM", "gpt2": "CausalLM", "bart": "Seq2SeqLM"}
EXPORTS = {"tensorflow": "saved_model", "torch": "onnx"}  # the format each backend produces


def _pairs():
    """Every (family, door) pair of the matrix, in the table's order."""
    pairs = [(family, "tour") for family in FAMILIES]
    pairs += [(family, "from_huggingface") for family in FAMILIES if family != "elmo"]
    pairs += [(family, "with_internals") for family in (*ENCODERS, "t5")]
    pairs += [(family, "keras_file") for family in FAMILIES]
    pairs += [(family, "prune_heads") for family in FAMILIES]
    pairs += [(family, f"pretrain_{objective}") for family, objectives in OBJECTIVES.items()
              for objective in objectives]
    pairs += [("t5", "pretrain_mlm")]  # refused
    pairs += [(family, f"finetune_{task}") for family in ENCODERS for task in ENCODER_TASKS]
    pairs += [("xlnet", f"finetune_{task}") for task in XLNET_TASKS]
    pairs += [("t5", "finetune_text"), *((family, f"finetune_{task}") for family, tasks in REFUSED_FINETUNING.items()
                                         for task in tasks)]
    pairs += [(family, "generate") for family in ("t5", "gpt2", "bart", "xlnet")]
    pairs += [(family, door) for door in ("predict", "export") for family in (*ENCODERS, *GENERATORS)]
    pairs += [(family, "to_huggingface") for family in FAMILIES]
    pairs += [(family, "to_keras_hub") for family in FAMILIES if family != "elmo"]
    pairs += [("bert", "pretrain_distribute_data"), ("bert", "pretrain_distribute_model"),
              ("bert", "finetune_distribute_data"), ("t5", "finetune_distribute_model")]
    pairs += [("+".join(families), f"example_{script}") for script, (families, _) in EXAMPLES.items()]
    return pairs


@pytest.fixture(scope="module", autouse=True)
def tiny_presets():
    """Each family's preset at its `TINY` size, for every door (the CLI's included) in this module."""
    with pytest.MonkeyPatch.context() as patch:
        for family, name in FAMILIES.items():
            for table in (presets.PRESETS, presets.T5_PRESETS, presets.GPT2_PRESETS, presets.BART_PRESETS,
                          presets.ELMO_PRESETS, presets.XLNET_PRESETS):
                if name in table:
                    patch.setitem(table, name, {**table[name], **TINY[family]})
        yield


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """`checkpoint(family)`: the family's tiny model.keras with `finetuning_data`'s vocab.txt beside it."""
    paths = {}

    def checkpoint(family):
        if family not in paths:
            folder = tmp_path_factory.mktemp(f"{family}_checkpoint")
            write_vocabulary(folder)
            model = presets.build(FAMILIES[family], vocabulary_size=len(VOCABULARY), dropout=0.0)
            paths[family] = str(folder / "model.keras")
            model.save(paths[family])
        return paths[family]

    return checkpoint


@pytest.fixture(scope="module")
def text_models(tmp_path_factory):
    """`text_model(family)`: `(model, path)`, the family's tiny classifier (encoders) or generator with
    a preprocessor over `finetuning_data`'s vocabulary, saved as a lone model.keras."""
    from kbert import tasks
    from kbert.text import TextPreprocessor, WordPieceTokenizer

    models = {}

    def text_model(family):
        if family not in models:
            folder = tmp_path_factory.mktemp(f"{family}_text")
            tokenizer = WordPieceTokenizer(write_vocabulary(folder))
            os.remove(folder / "vocab.txt")
            options = {"end_id": VOCABULARY.index("[SEP]")} if family == "gpt2" else {}
            backbone = presets.build(FAMILIES[family], vocabulary_size=len(VOCABULARY), dropout=0.0, **options)
            preprocessor = TextPreprocessor(tokenizer, 16, labels=["no", "yes"])
            if family in GENERATORS:
                model = getattr(tasks, GENERATORS[family])(backbone, preprocessor=preprocessor)
            else:
                model = tasks.TextClassifier(backbone, 2, preprocessor=preprocessor)
            model.save(folder / "model.keras")
            models[family] = model, str(folder / "model.keras")
        return models[family]

    return text_model


def _run(arguments, capsys):
    """`kbert arguments` in this process: it must return 0; its printed output."""
    try:
        status = cli.main(arguments)
    except SystemExit as stop:
        pytest.fail(f"kbert {' '.join(arguments)} stopped ({stop.code}): {capsys.readouterr().err}")
    assert status == 0
    return capsys.readouterr().out


def _refused(arguments, capsys):
    """`kbert arguments` in this process: it must stop with a non-zero status and one line; that line."""
    with pytest.raises(SystemExit) as stop:
        cli.main(arguments)
    code = stop.value.code
    message = code if isinstance(code, str) else capsys.readouterr().err  # SystemExit(message) prints at exit
    assert code not in (0, None)
    assert message.startswith("kbert: ") and message.strip().count("\n") == 0, message
    return message


def _inputs(family, model):
    return model_inputs(FAMILIES[family], model, SENTENCE)[1]


def _numpy(outputs):
    return {key: keras.ops.convert_to_numpy(value) for key, value in outputs.items()}


# --- the doors ---------------------------------------------------------------------------------------


def _tour(family, capsys, **_):
    printed = _run(["tour", "--model", FAMILIES[family], "--sentence", SENTENCE], capsys)
    assert "parameters" in printed and "forward time" in printed
    assert ("generated ids" in printed) == (family in ("t5", "gpt2", "bart"))


def _with_internals(family, **_):
    model = presets.build(FAMILIES[family])
    inputs = _inputs(family, model)
    internals = _numpy(model.with_internals()(inputs))
    outputs = _numpy(model(inputs))
    for key, value in outputs.items():
        np.testing.assert_allclose(internals[key], value, atol=1e-5)
    states = [key for key in internals if key.endswith("hidden_states")]
    probabilities = [key for key in internals if key.endswith("attention_probabilities")]
    assert states and probabilities
    for key in probabilities:  # each query's probabilities sum to 1
        np.testing.assert_allclose(internals[key].sum(-1), 1.0, atol=1e-4)


def _keras_file(family, tmp_path, **_):
    model = presets.build(FAMILIES[family], dropout=0.0)
    inputs = _inputs(family, model)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    expected, outputs = _numpy(model(inputs)), _numpy(loaded(inputs))
    assert outputs.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(outputs[key], value)


def _prune_heads(family, **_):
    model = presets.build(FAMILIES[family], dropout=0.0)
    if family in ("gpt2", "bart", "elmo", "xlnet"):
        with pytest.raises(ValueError, match=f"^prune_heads takes a kbert Encoder or T5.*{type(model).__name__}.$"):
            prune_heads(model, {0: [0]})
        return
    heads = {"encoder": {0: [0]}, "decoder": {1: [1]}} if family == "t5" else {0: [1]}
    pruned = prune_heads(model, heads)
    assert pruned.count_params() < model.count_params()
    inputs = _inputs(family, model)
    for key, value in _numpy(pruned(inputs)).items():
        assert value.shape == tuple(model(inputs)[key].shape) and np.isfinite(value).all()


def _pretrain(family, objective, capsys, corpus, tmp_path, **_):
    arguments = ["pretrain", "--corpus", corpus, "--output", str(tmp_path / "run"), "--model", FAMILIES[family],
                 "--objective", objective, "--steps", "2", "--batch-size", "4", "--sequence-length", "32",
                 "--vocabulary-size", "1000"]
    if objective not in OBJECTIVES[family]:
        assert "--objective span_corruption trains the T5 models" in _refused(arguments, capsys)
        assert not (tmp_path / "run").exists()
        return
    _run(arguments, capsys)
    with open(tmp_path / "run" / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["model"], metrics["objective"]) == (FAMILIES[family], objective)
    assert np.isfinite([value for value in metrics.values() if isinstance(value, float)]).all()


def _finetune(family, task, capsys, checkpoints, tmp_path, **_):
    train, validation = write_task_files(task, tmp_path)
    refused = task in REFUSED_FINETUNING.get(family, ())
    checkpoint = FAMILIES[family] if refused else checkpoints(family)
    arguments = ["finetune", "--task", task, "--checkpoint", checkpoint, "--train", train, "--validation",
                 validation, "--vocabulary", str(tmp_path / "vocab.txt"), "--epochs", "1", "--batch-size", "4",
                 "--learning-rate", "1e-3", "--sequence-length", "24", "--output", str(tmp_path / "run")]
    write_vocabulary(tmp_path)
    if refused:
        assert f"--task {task} fine-tunes a kbert" in _refused(arguments, capsys)
        return
    printed = _run(arguments, capsys)
    assert "Validation: " in printed
    assert sorted(os.listdir(tmp_path / "run")) == ["metrics.json", "model.keras", "predictions.jsonl", "run.json"]


def _predict(family, capsys, text_models, tmp_path, **_):
    model, path = text_models(family)
    texts = [SENTENCE, SENTENCE.split()[0]]  # --input: batched by length, written in input order
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    printed = _run(["predict", "--model", path, "--input", str(tmp_path / "in.jsonl"), "--batch-size", "2"], capsys)
    for line, text in zip(printed.strip().splitlines(), texts, strict=True):
        result, expected = json.loads(line), model.classify(text)
        assert result["label"] == expected["label"] and set(result["scores"]) == {"no", "yes"}
        np.testing.assert_allclose(result["score"], expected["score"], atol=1e-6)


def _exported_logits(format, output, inputs, texts):
    """The logits of the export in `output`: the SavedModel on `texts`, the ONNX model on token `inputs`."""
    if format == "saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(output)
        return loaded.serve(tf.constant(texts))["logits"].numpy()
    import onnxruntime

    session = onnxruntime.InferenceSession(os.path.join(output, "model.onnx"))
    return session.run(None, {i.name: inputs[i.name].astype("int64") for i in session.get_inputs()})[0]


def _export(family, capsys, text_models, tmp_path, **_):
    model, path = text_models(family)
    backend = keras.backend.backend()
    arguments = ["export", "--model", path, "--output", str(tmp_path / "out")]
    if backend not in EXPORTS:
        assert "produced on the tensorflow backend" in _refused([*arguments, "--format", "saved_model"], capsys)
        return
    if family in GENERATORS:
        message = _refused([*arguments, "--format", EXPORTS[backend]], capsys)
        assert f"exports classifiers and taggers; the model is a {GENERATORS[family]}" in message
        return
    if EXPORTS[backend] == "onnx" and family in ("bigbird", "longformer"):
        assert "--format saved_model (TensorFlow) can" in _refused([*arguments, "--format", "onnx"], capsys)
        return
    if EXPORTS[backend] == "onnx":
        pytest.importorskip("onnxruntime")
    _run([*arguments, "--format", EXPORTS[backend]], capsys)
    texts = [SENTENCE, "bob is in paris."]
    inputs = model.preprocessor.encode(texts)
    inputs = {name: value for name, value in inputs.items() if name in model.backbone.input}
    tolerance = 1e-5 if EXPORTS[backend] == "saved_model" else 1e-4
    np.testing.assert_allclose(_exported_logits(EXPORTS[backend], str(tmp_path / "out"), inputs, texts),
                               keras.ops.convert_to_numpy(model(inputs)), atol=tolerance)


def _to_huggingface(family, tmp_path, **_):
    model = presets.build(FAMILIES[family])
    folder = str(tmp_path / "exported")
    if family == "elmo":
        with pytest.raises(ValueError, match="ELMo has no transformers class"):
            kbert.to_huggingface(model, folder)
        return
    with pytest.warns(UserWarning, match="no preprocessor"):
        kbert.to_huggingface(model, folder)
    import transformers

    with open(os.path.join(folder, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    _, info = getattr(transformers, architecture).from_pretrained(folder, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info


# family -> why `to_keras_hub` refuses it (what its message names).
REFUSED_KERAS_HUB = {"bert": "activation='gelu'", "electra": "activation='gelu': KerasHub's ElectraBackbone",
                     "xlnet": "XLNetBackbone", "bigbird": "no counterpart", "longformer": "no counterpart"}


def _to_keras_hub(family, tmp_path, **_):
    wide = {"intermediate_dim": 4 * TINY[family]["hidden_dim"]} if family == "gpt2" else {}  # KerasHub's 4H
    model = presets.build(FAMILIES[family], dropout=0.0, **wide)
    preset = str(tmp_path / "preset")
    if family in REFUSED_KERAS_HUB:
        with pytest.raises(ValueError, match=REFUSED_KERAS_HUB[family]):
            kbert.to_keras_hub(model, preset)
        return
    import keras_hub

    kbert.to_keras_hub(model, preset)
    theirs = keras_hub.models.Backbone.from_preset(preset)
    inputs = _inputs(family, model)
    outputs = theirs({key: value for key, value in inputs.items() if key in theirs.input})
    outputs = _numpy(outputs if isinstance(outputs, dict) else {"sequence_output": outputs})
    ours = _numpy(model(inputs))
    for key, value in outputs.items():
        if key.endswith("sequence_output"):
            np.testing.assert_allclose(value, ours[key], atol=1e-4, err_msg=key)


def _generate(family, **_):
    """The one family here with no generator of its own: XLNet (`CausalLM` names what it lacks)."""
    from kbert.tasks import CausalLM

    with pytest.raises(ValueError, match="^Generation needs a model with .*XLNet lacks [^\n]*$"):
        CausalLM(presets.build(FAMILIES[family]))


def _example(script, tmp_path, **_):
    """The script run as `python examples/<script>.py ARGUMENTS` runs it: in a subprocess for
    `SUBPROCESS_EXAMPLES`, the others in this process (`runpy`, as `__main__`, with the script's folder first
    on `sys.path` and a fresh working folder), which saves each one's interpreter and imports."""
    _, arguments = EXAMPLES[script]
    values = dict(output=tmp_path / "out", backend=keras.backend.backend())
    path = ROOT / "examples" / f"{script}.py"
    arguments = [a.format(**values) for a in arguments]
    if script not in SUBPROCESS_EXAMPLES:
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(tmp_path)
            patch.syspath_prepend(str(path.parent))
            patch.setattr(sys, "argv", [str(path), *arguments])
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as stop:
                assert stop.code in (None, 0), f"{script} exited with {stop.code}"
        return
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(path), *arguments], cwd=tmp_path, env=environment,
                            capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def _elsewhere(family, door, **_):
    """The pair's test lives in another file: check that it is there."""
    path, name = ELSEWHERE[(family, door)].split("::")
    tree = ast.parse((ROOT / path).read_text())
    assert name in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}, (path, name)


def _door(family, door):
    """The function that runs `door` for `family`, with its door-specific arguments."""
    if (family, door) in ELSEWHERE:
        return _elsewhere, {}
    kind, _, what = door.partition("_")
    if kind == "pretrain":
        return _pretrain, {"objective": what}
    if kind == "finetune":
        return _finetune, {"task": what}
    if kind == "example":
        return _example, {"script": what}
    doors = {"tour": _tour, "with": _with_internals, "keras": _keras_file, "prune": _prune_heads,
             "generate": _generate, "predict": _predict, "export": _export, "to": _to_huggingface}
    if door == "to_keras_hub":
        return _to_keras_hub, {}
    return doors[kind], {}


_FAMILY_ORDER = {family: index for index, family in enumerate(dict.fromkeys(family for family, _ in _pairs()))}


def _rotation():
    """(family, door) -> the backend whose run of the suite runs the pair.

    A fixed rotation, so that a failure reproduces: the pairs, grouped by
    family in the table's order, take the backends in turn (so each family
    with three doors or more meets every backend), except the pairs `PINNED`
    names. `KBERT_EVERY_DOOR=all` runs every pair in every backend's run.
    """
    rotating = sorted((pair for pair in _pairs() if pair[1] not in PINNED), key=lambda pair: _FAMILY_ORDER[pair[0]])
    backends = {pair: ROTATION[index % len(ROTATION)] for index, pair in enumerate(rotating)}
    return {pair: PINNED.get(pair[1], backends.get(pair)) for pair in _pairs()}


def _this_runs_pairs():
    if os.environ.get("KBERT_EVERY_DOOR") == "all":
        return _pairs()
    return [pair for pair, backend in _rotation().items() if backend == keras.backend.backend()]


@pytest.mark.parametrize("family, door", [pytest.param(f, d, id=f"{f}-{d}") for f, d in _this_runs_pairs()])
@pytest.mark.slow(reason="a door is a whole job or example program (data, model, steps, files) on one family")
def test_door(family, door, request, capsys, tmp_path):
    run, options = _door(family, door)
    needs = {_pretrain: "corpus", _finetune: "checkpoints", _predict: "text_models", _export: "text_models"}
    fixtures = {needs[run]: request.getfixturevalue(needs[run])} if run in needs else {}
    run(family=family, door=door, capsys=capsys, tmp_path=tmp_path, **options, **fixtures)


def test_every_pair_is_in_the_matrix_once():
    pairs = _pairs()
    assert len(pairs) == len(set(pairs))
    assert set(ELSEWHERE) <= set(pairs)
    assert {family for family, _ in pairs} >= set(FAMILIES)


@pytest.mark.backend_independent  # reads the table
def test_the_rotation_gives_each_pair_one_backend_and_each_slot_a_quarter():
    rotation = _rotation()
    assert sorted(rotation) == sorted(_pairs()) and set(rotation.values()) == set(BACKENDS)
    shares = [sum(backend == b for (_, door), backend in rotation.items() if door not in PINNED) / ROTATION.count(b)
              for b in BACKENDS]
    assert max(shares) - min(shares) <= 1, shares
    for family in FAMILIES:  # every family meets every backend in the matrix too
        assert {b for (f, _), b in rotation.items() if family in f.split("+")} == set(BACKENDS), family

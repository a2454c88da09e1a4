"""`kbert pretrain` and `kbert finetune` over several devices and processes end as on one device.

Each equality test starts its backend in fresh processes (the device count,
and the processes, must be set before the framework starts), over
127.0.0.1, with a time limit, and runs once: in the test run of the
backend it exercises. Metrics compare to 1e-5 (float32 sums reduced in
another order). Run as a script, `python tests/jobs/test_distributed_runs.py
jax_devices FOLDER`, this file does the 2-device JAX runs and prints their
metrics as JSON.
"""

import json
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from finetuning_data import write_checkpoint, write_t5_checkpoint, write_task_files  # noqa: E402

BACKEND = keras.backend.backend()
# The tests that run JAX only in subprocesses go in the JAX run of the suite: it runs as two
# processes and ends first, while the PyTorch run holds every backend-independent test; the
# subprocesses share the JAX run's compilation cache (tests/conftest.py).
SUBPROCESS_RUN = "jax"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-5
TIME_LIMIT = 600  # seconds a subprocess may take before the test fails (not a speed check)
PRETRAIN = ["--steps", "2", "--batch-size", "4", "--sequence-length", "32", "--vocabulary-size", "200",
            "--save-every", "1"]
FINETUNE = dict(epochs=1, batch_size=4, learning_rate=1e-3, sequence_length=24, log=None)


def write_corpus(folder):
    """Ten BBC News business articles (real text), one file, a blank line between documents."""
    from kbert.jobs.bbc_news import bbc_news_folder

    business = os.path.join(bbc_news_folder(), "business")
    texts = []
    for name in sorted(os.listdir(business))[:10]:
        with open(os.path.join(business, name), "rb") as f:
            texts.append(f.read().decode("utf-8", "replace").strip())
    path = os.path.join(folder, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(texts))
    return path


def _metrics(output):
    with open(os.path.join(output, "metrics.json")) as f:
        return {k: v for k, v in json.load(f).items() if isinstance(v, float) and k != "wall_time_seconds"}


def assert_same_metrics(actual, expected):
    assert actual.keys() == expected.keys() and actual
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(**variables):
    """The suite's environment for a job's process: its `XLA_FLAGS` (XLA's quick CPU compiles) and JAX cache."""
    return dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **variables)


def _kbert(*arguments):
    return [sys.executable, "-m", "kbert", *arguments]


def _pretrain_reference(corpus, folder, steps=2):
    from kbert.jobs.pretraining_run import run_pretraining

    output = os.path.join(folder, "reference")
    run_pretraining(corpus=[corpus], output=output, steps=steps, batch_size=4, sequence_length=32, vocabulary_size=200,
                    save_every=1, distribute="none", log=lambda line: None)
    return _metrics(output)


# ---------------------------------------------------------------------------
# 2 virtual JAX devices (a subprocess runs this file as a script).
# ---------------------------------------------------------------------------


def jax_devices_pretrain(folder):
    """Pretraining on 2 devices: none, data, model; a batch the devices do not divide; a width either."""
    import kbert
    from kbert.distribute import DistributedTraining
    from kbert.jobs.pretraining_run import run_pretraining

    corpus = write_corpus(folder)
    results = {"devices": len(keras.distribution.list_devices())}
    for mode in ("none", "data", "model"):
        output = os.path.join(folder, f"pretrain_{mode}")
        run_pretraining(corpus=[corpus], output=output, steps=2, batch_size=4, sequence_length=32,
                        vocabulary_size=200, distribute=mode, model_parallel=2 if mode == "model" else 1,
                        log=lambda line: None)
        results[f"pretrain_{mode}"] = _metrics(output)
    for mode in ("data", "model"):
        results[f"pretrain_{mode}_weight_difference"] = _weight_difference(
            os.path.join(folder, f"pretrain_{mode}"), os.path.join(folder, "pretrain_none"))
    try:
        run_pretraining(corpus=[corpus], output=os.path.join(folder, "odd"), batch_size=3, distribute="data")
    except ValueError as error:
        results["odd_batch"] = str(error)
    odd = kbert.models.bert_tiny(vocabulary_size=16, num_layers=1, num_heads=3, hidden_dim=15, intermediate_dim=30)
    try:
        DistributedTraining("model", 2, batch_size=4).distribution(odd)
    except ValueError as error:
        results["odd_width"] = str(error)
    return results


def jax_devices_finetune(folder):
    """Fine-tuning on 2 devices: tagging (none, data), T5 text to text (none, model)."""
    from kbert.jobs.finetuning_run import run_finetuning

    results = {"devices": len(keras.distribution.list_devices())}
    for name in ("bert", "t5"):
        os.makedirs(os.path.join(folder, name))
    checkpoint = write_checkpoint(os.path.join(folder, "bert"))
    t5 = write_t5_checkpoint(os.path.join(folder, "t5"))
    for task, model, modes in (("tag", checkpoint, ("none", "data")), ("text", t5, ("none", "model"))):
        train, validation = write_task_files(task, folder, count=8)
        for mode in modes:
            output = os.path.join(folder, f"{task}_{mode}")
            run_finetuning(task, model, train, validation, output=output, distribute=mode,
                           model_parallel=2 if mode == "model" else 1, **FINETUNE)
            results[f"{task}_{mode}"] = _metrics(output)
        # The scores are discrete (a near tie can flip a tag); the fine-tuned weights are the updates themselves.
        results[f"{task}_weight_difference"] = _weight_difference(*(os.path.join(folder, f"{task}_{mode}")
                                                                     for mode in modes))
    return results


def _weight_difference(output, reference):
    """The largest difference between the weights of two runs' `model.keras`."""
    weights = [keras.saving.load_model(os.path.join(folder, "model.keras"), compile=False).get_weights()
               for folder in (output, reference)]
    return max(float(np.abs(a - b).max()) for a, b in zip(*weights))


def _two_jax_devices(run, folder):
    env = _environment(KERAS_BACKEND="jax",
                       XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2")
    result = subprocess.run([sys.executable, __file__, run, str(folder)], env=env, capture_output=True,
                            text=True, timeout=TIME_LIMIT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(BACKEND != SUBPROCESS_RUN, reason=f"runs JAX in a subprocess, once (in the {SUBPROCESS_RUN} run)")
@pytest.mark.slow(reason="a two-device JAX process, and the one-device reference")
def test_two_jax_devices_pretrain_as_one(tmp_path):
    results = _two_jax_devices("jax_devices_pretrain", tmp_path)
    assert results["devices"] == 2
    assert_same_metrics(results["pretrain_data"], results["pretrain_none"])
    assert_same_metrics(results["pretrain_model"], results["pretrain_none"])
    assert results["pretrain_data_weight_difference"] < TOLERANCE
    assert results["pretrain_model_weight_difference"] < TOLERANCE
    assert results["odd_batch"].startswith("The global batch size 3 is not divisible by the 2 data-parallel")
    assert "over a 'model' axis of size 2: not divisible" in results["odd_width"]


@pytest.mark.skipif(BACKEND != SUBPROCESS_RUN, reason=f"runs JAX in a subprocess, once (in the {SUBPROCESS_RUN} run)")
@pytest.mark.slow(reason="a two-device JAX process, and the one-device reference")
def test_two_jax_devices_finetune_as_one(tmp_path):
    results = _two_jax_devices("jax_devices_finetune", tmp_path)
    assert results["devices"] == 2
    assert results["tag_weight_difference"] < TOLERANCE
    assert results["text_weight_difference"] < TOLERANCE
    assert_same_metrics(results["text_model"], results["text_none"])


# ---------------------------------------------------------------------------
# Two processes over 127.0.0.1.
# ---------------------------------------------------------------------------


def _run_processes(commands, timeout=TIME_LIMIT):
    processes = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for command, env in commands]
    try:
        outputs = [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [process.returncode for process in processes], outputs


def _jax_process(index, port, *arguments):
    env = _environment(KERAS_BACKEND="jax", KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
                       KERAS_DISTRIBUTION_NUM_PROCESSES="2", KERAS_DISTRIBUTION_PROCESS_ID=str(index))
    return _kbert(*arguments), env


@pytest.mark.skipif(BACKEND != "torch", reason="runs torchrun, once (in the PyTorch test run)")
@pytest.mark.slow(reason="two torchrun processes joined by gloo, and the one-process reference")
def test_torchrun_processes_pretrain_as_one(tmp_path):
    corpus = write_corpus(str(tmp_path))
    output = str(tmp_path / "two")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                "127.0.0.1", "--master-port", str(_free_port()), "-m", "kbert"]
    command = [*torchrun, "pretrain", "--corpus", corpus, "--output", output, *PRETRAIN]
    codes, outputs = _run_processes([(command, _environment(KERAS_BACKEND="torch"))])
    assert codes == [0], outputs
    assert "data-parallel over 2 replicas in 2 processes" in outputs[0]
    assert_same_metrics(_metrics(output), _pretrain_reference(corpus, str(tmp_path)))


@pytest.mark.skipif(BACKEND != SUBPROCESS_RUN, reason=f"runs JAX processes, once (in the {SUBPROCESS_RUN} run)")
@pytest.mark.slow(reason="two JAX processes, one killed; the other waits out the collective's timeout; a rerun resumes")
def test_two_jax_processes_lose_one_resume_and_end_as_one_process(tmp_path):
    """Two JAX processes joined over loopback: one is killed after the first save, the other stops naming it;
    the rerun of both resumes and ends with the metrics of one uninterrupted process."""
    corpus = write_corpus(str(tmp_path))
    output = tmp_path / "run"
    arguments = ("pretrain", "--corpus", corpus, "--output", str(output), *PRETRAIN[2:], "--steps", "6")
    port = _free_port()
    processes = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for command, env in (_jax_process(i, port, *arguments) for i in (0, 1))]
    try:
        deadline = time.monotonic() + TIME_LIMIT
        while not (output / "resume_state.npz").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        processes[1].kill()
        survivor = processes[0].communicate(timeout=TIME_LIMIT)[0]
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert processes[0].returncode == 3, survivor
    assert survivor.strip().splitlines()[-1].startswith("kbert: lost process 1 of 2 (this is process 0)"), survivor
    port = _free_port()
    codes, outputs = _run_processes([_jax_process(index, port, *arguments) for index in (0, 1)])
    assert codes == [0, 0], outputs
    assert "Resuming from the saved state at step" in outputs[0]
    assert "data-parallel over 2 replicas in 2 processes" in outputs[0]
    assert "Pretraining" not in outputs[1]  # process 0 alone logs
    assert_same_metrics(_metrics(str(output)), _pretrain_reference(corpus, str(tmp_path), steps=6))


# ---------------------------------------------------------------------------
# Bad input (in this process).
# ---------------------------------------------------------------------------


def test_incomplete_keras_distribution_variables_are_refused(monkeypatch):
    from kbert.distribute import DistributedTraining

    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    with pytest.raises(ValueError, match="KERAS_DISTRIBUTION_NUM_PROCESSES set but "
                                         "KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_PROCESS_ID not"):
        DistributedTraining(batch_size=4)


def test_a_model_parallel_size_the_devices_do_not_divide_is_refused():
    from kbert.distribute import DistributedTraining

    expected = "must be a positive divisor of the 1 devices" if BACKEND == "jax" else "on KERAS_BACKEND=jax"
    with pytest.raises(ValueError, match=expected):
        DistributedTraining("model", model_parallel=3, batch_size=4)
    with pytest.raises(ValueError, match="--model-parallel 2 needs --distribute model"):
        DistributedTraining("data", model_parallel=2, batch_size=4)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TF_CONFIG is TensorFlow's")
def test_several_tensorflow_workers_are_refused_naming_the_keras_issue(monkeypatch):
    from kbert.distribute import DistributedTraining

    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    with pytest.raises(ValueError, match=r"MultiWorkerMirroredStrategy \(https://github.com/keras-team/keras/"
                                         r"issues/20585\); run several hosts with KERAS_BACKEND=jax"):
        DistributedTraining(batch_size=4)


if __name__ == "__main__":
    print(json.dumps(globals()[sys.argv[1]](sys.argv[2])))

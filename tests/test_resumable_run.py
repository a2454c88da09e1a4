"""ResumableRun on a tiny dropout model and a seeded, reshuffled stream: exact resume, signals, NaN, the folder."""

import json
import os
import signal

import keras
import numpy as np
import pytest

from kbert.resumable_run import EARLIER_RESUME_STATE_FILE, RESUME_STATE_FILE, RUN_FILE, ResumableRun

tf = pytest.importorskip("tensorflow")

TOTAL, SAVE_EVERY, PASS = 10, 3, 3  # 3 batches a pass: the resume crosses the reshuffles between passes
ARGUMENTS = {"seed": 0, "steps": TOTAL}


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dropout(0.5), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    return model


def _stream(poisoned_batch=None):
    x = np.random.default_rng(0).normal(size=(4 * PASS, 4)).astype("float32")
    if poisoned_batch is not None:
        x[4 * poisoned_batch : 4 * poisoned_batch + 4] = np.nan
        return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4).repeat()
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True)))
    return data.batch(4).repeat()


def _train(output, callbacks=(), **options):
    """`(run, model)` after `ResumableRun.fit` on a fresh model (from the resume state, if any)."""
    model = _model()
    run = ResumableRun(str(output), ARGUMENTS, TOTAL, outputs=("model.keras",), save_every=SAVE_EVERY,
                       log=None, **options)
    run.fit(model, _stream(), steps_per_epoch=4, callbacks=callbacks, verbose=0)
    return run, model


def _weights(model):
    return [keras.ops.convert_to_numpy(v) for v in [*model.variables, *model.optimizer.variables]]


def _saved_step(output):
    with np.load(os.path.join(output, RESUME_STATE_FILE)) as saved:
        return json.loads(str(saved["state"]))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    _, model = _train(tmp_path_factory.mktemp("uninterrupted"))
    return _weights(model)


class _Crash(keras.callbacks.Callback):
    """At the start of step `at` (1-based): raise, or send this process `signal_number`."""

    def __init__(self, at, signal_number=None):
        super().__init__()
        self.at, self.signal_number, self.step = at, signal_number, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        if self.step == self.at and self.signal_number:
            os.kill(os.getpid(), self.signal_number)
        elif self.step == self.at:
            raise RuntimeError("crash")


def _check_same(resumed, uninterrupted):
    assert len(resumed) == len(uninterrupted)
    for a, b in zip(resumed, uninterrupted):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_a_crash_resumes_from_the_last_resume_state_exactly(uninterrupted, tmp_path):
    with pytest.raises(RuntimeError, match="crash"):
        _train(tmp_path, [_Crash(at=8)])  # saves at steps 3 and 6
    state = _saved_step(tmp_path)
    assert state["step"] == 6
    run, model = _train(tmp_path)
    assert run.step == TOTAL and int(model.optimizer.iterations) == TOTAL
    _check_same(_weights(model), uninterrupted)  # dropout seeds, Adam moments, the batches: all the same
    assert run.elapsed_seconds() > state["elapsed_seconds"]  # the wall time adds up across the parts
    run.finish()
    assert sorted(os.listdir(tmp_path)) == [RUN_FILE]


def test_a_run_written_before_the_rename_resumes_from_its_checkpoint_npz(uninterrupted, tmp_path):
    """An earlier run's `checkpoint.npz` is read, replaced by `resume_state.npz` at the next save, then removed."""
    with pytest.raises(RuntimeError, match="crash"):
        _train(tmp_path, [_Crash(at=5)])  # saved at step 3
    os.rename(tmp_path / RESUME_STATE_FILE, tmp_path / EARLIER_RESUME_STATE_FILE)
    with pytest.raises(RuntimeError, match="crash"):
        _train(tmp_path, [_Crash(at=4)])  # resumed at step 3, saved at step 6
    assert _saved_step(tmp_path)["step"] == 6 and not (tmp_path / EARLIER_RESUME_STATE_FILE).exists()
    os.rename(tmp_path / RESUME_STATE_FILE, tmp_path / EARLIER_RESUME_STATE_FILE)
    run, model = _train(tmp_path)
    _check_same(_weights(model), uninterrupted)
    run.finish()
    assert sorted(os.listdir(tmp_path)) == [RUN_FILE]


def test_losses_are_each_steps_own_across_a_resume(tmp_path):
    whole, _ = _train(tmp_path / "whole")
    history = whole.model.history.history["loss"]  # epoch means, epochs of 4 steps
    assert len(whole.losses) == TOTAL
    np.testing.assert_allclose([np.mean(whole.losses[:4]), np.mean(whole.losses[4:8])], history[:2], rtol=1e-5)
    with pytest.raises(RuntimeError):
        _train(tmp_path / "run", [_Crash(at=8)])  # saved at step 6, in the second epoch
    resumed, _ = _train(tmp_path / "run")
    np.testing.assert_allclose(resumed.losses, whole.losses, rtol=1e-5)


class _Stop(Exception):
    pass


def _raise_stop(number, frame):
    raise _Stop(number)


@pytest.mark.parametrize("signal_number, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, _Stop)])
def test_a_signal_saves_its_step_then_acts_as_before(signal_number, raised, uninterrupted, tmp_path):
    # SIGTERM's default would end pytest; a background job (as the suite runs) starts with SIGINT ignored.
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_stop),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        with pytest.raises(raised):
            _train(tmp_path, [_Crash(at=5, signal_number=signal_number)])
        assert signal.getsignal(signal.SIGTERM) is _raise_stop  # handed back
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    assert _saved_step(tmp_path)["step"] == 5
    _, model = _train(tmp_path)
    _check_same(_weights(model), uninterrupted)


def test_an_ignored_signal_stays_ignored(uninterrupted, tmp_path):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job, or under nohup
    try:
        _, model = _train(tmp_path, [_Crash(at=5, signal_number=signal.SIGINT)])
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    _check_same(_weights(model), uninterrupted)  # the run went on to its end


def test_a_nan_loss_stops_the_run_naming_the_step(tmp_path):
    run = ResumableRun(str(tmp_path), ARGUMENTS, TOTAL, save_every=1, log=None)
    with pytest.raises(FloatingPointError, match=r"The loss is nan at step 3: training stopped"):
        run.fit(_model(), _stream(poisoned_batch=2), steps_per_epoch=4, verbose=0)
    assert _saved_step(tmp_path)["step"] == 2  # the last finite step's checkpoint is kept


def test_other_arguments_are_refused_by_name_or_overwritten(tmp_path):
    with pytest.raises(RuntimeError):
        _train(tmp_path, [_Crash(at=4)])
    (tmp_path / "model.keras").write_text("an earlier output")
    other = dict(ARGUMENTS, seed=1, vocabulary_size=10)
    with pytest.raises(ValueError, match=r"holds a run with other arguments: --seed 0 \(now 1\), "
                                         r"--vocabulary-size None \(now 10\); pass --overwrite"):
        ResumableRun(str(tmp_path), other, TOTAL, outputs=("model.keras",))
    run = ResumableRun(str(tmp_path), other, TOTAL, outputs=("model.keras",), overwrite=True)
    assert run.step == 0 and sorted(os.listdir(tmp_path)) == [RUN_FILE]
    assert json.loads((tmp_path / RUN_FILE).read_text())["arguments"] == other


@pytest.mark.parametrize("earlier", ["nothing", "an unrecorded output"])
def test_overwrite_starts_afresh_whatever_the_folder_holds(tmp_path, earlier):
    folder = tmp_path / "new"  # created by the run
    if earlier != "nothing":
        folder.mkdir()
        (folder / "vocab.txt").write_text("[PAD]\n")
    run = ResumableRun(str(folder), ARGUMENTS, TOTAL, outputs=("vocab.txt",), overwrite=True)
    assert run.step == 0 and sorted(os.listdir(folder)) == [RUN_FILE]


def test_outputs_of_an_unrecorded_run_are_refused(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ValueError, match="holds vocab.txt of an earlier run whose arguments are not recorded"):
        ResumableRun(str(tmp_path), ARGUMENTS, TOTAL, outputs=("vocab.txt",))


def test_an_output_that_is_a_file_or_cannot_be_written(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(ValueError, match=f"--output {path} exists and is not a folder"):
        ResumableRun(str(path), ARGUMENTS, TOTAL)
    if os.geteuid() != 0:
        folder = tmp_path / "read_only"
        folder.mkdir(mode=0o555)
    elif os.path.isdir("/proc/self"):  # root writes through chmod; /proc takes no new files
        folder = "/proc/self"
    else:
        pytest.skip("running as root without /proc: no folder here refuses writes")
    with pytest.raises(ValueError, match=f"--output {folder} cannot be written"):
        ResumableRun(str(folder), ARGUMENTS, TOTAL)


def test_a_save_cut_short_leaves_the_last_resume_state(tmp_path):
    with pytest.raises(RuntimeError):
        _train(tmp_path, [_Crash(at=5)])
    (tmp_path / f"{RESUME_STATE_FILE}.tmp-123").write_bytes(b"half a resume state")  # as a kill -9 leaves it
    run = ResumableRun(str(tmp_path), ARGUMENTS, TOTAL, save_every=SAVE_EVERY, log=None)
    assert run.step == 3 and sorted(os.listdir(tmp_path)) == [RESUME_STATE_FILE, RUN_FILE]


def test_a_run_is_complete_once_its_outputs_are_written_and_its_resume_state_gone(tmp_path):
    run = ResumableRun(str(tmp_path), {"seed": 0}, total_steps=2, outputs=("model.keras",), log=None)
    assert not run.complete
    (tmp_path / "model.keras").write_text("saved")
    (tmp_path / RESUME_STATE_FILE).write_text("a resume state")  # interrupted after saving: not complete
    assert not run.complete
    run.finish()
    assert ResumableRun(str(tmp_path), {"seed": 0}, total_steps=2, outputs=("model.keras",), log=None).complete

"""A training run that resumes exactly where it stopped, for `kbert pretrain` and `kbert finetune`.

Keras' `BackupAndRestore` restores the weights and the epoch, but not the
position in the data stream, so a resumed run sees other batches than an
uninterrupted one. Here the stream is deterministic by seed (it repeats, and
its shuffles are seeded), so a resume skips to the exact batch, and one
file, the run's resume state (`resume_state.npz`), holds all that the next
step depends on: every model
variable (the random `SeedGenerator` states included), every optimizer
variable (its `iterations` included), the step, and the wall time so far.
It is written every `save_every` steps and when SIGINT or SIGTERM arrives,
to a temporary file first and then `os.replace`d, so a `kill -9` during a
save leaves the previous resume state whole. ("Checkpoint" in kbert means
a pretrained model to import, `kbert.checkpoints`; runs before this name
wrote `checkpoint.npz`, which a rerun still resumes from.)
"""

import contextlib
import glob
import json
import math
import os
import shutil
import signal
import threading
import time

import keras
import numpy as np

from kbert.backend.ops import framework_random_state, host_numpy, set_framework_random_state

RUN_FILE = "run.json"
RESUME_STATE_FILE = "resume_state.npz"
# The resume state's name in runs written before it was renamed: read, then replaced at the next save.
EARLIER_RESUME_STATE_FILE = "checkpoint.npz"
DEFAULT_SAVE_EVERY = 50
_PROBE_BYTES = 1 << 20
_CAUGHT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _option(name):
    return "--" + name.replace("_", "-")


def _write_atomically(path, write):
    """Call `write(file)` on a temporary file beside `path`, then move it over `path`."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def check_output(output):
    """Refuse an `--output` that exists and is not a folder."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"--output {output} exists and is not a folder.")


def _probe(folder, size):
    """Write and remove `size` bytes in `folder`; a folder that cannot take them raises `ValueError`."""
    path = os.path.join(folder, f".kbert-probe-{os.getpid()}")
    chunk = b"\0" * min(size, _PROBE_BYTES)
    try:
        with open(path, "wb") as f:
            for _ in range(math.ceil(size / len(chunk))):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        raise ValueError(f"--output {folder} cannot be written ({size:,} bytes tried): {error.strerror}.") from None
    finally:
        if os.path.exists(path):
            os.remove(path)


class ResumableRun(keras.callbacks.Callback):
    """Runs `fit` from the saved step to `total_steps`, saving its resume state on the way; refuses to mix runs.

    Creating it checks `output` (a folder that can be written), and compares
    `arguments` with those the folder's previous run recorded: other values
    raise a `ValueError` naming them, unless `overwrite` (which removes the
    previous run's files, `outputs` among them, and starts afresh). `fit`
    then trains from `step`, and `losses` holds each step's training loss
    (the earlier parts' included), for a learning curve. A NaN or infinite loss stops the run with a
    `FloatingPointError` naming the step. Call `finish()` once the run's
    outputs are written: it removes the resume state.

    Args:
        output: the run's folder; created if absent.
        arguments: a JSON-able dict of what defines the run (named as the
            command's options, e.g. `vocabulary_size`).
        total_steps: the steps of the whole run.
        outputs: names of the files the run writes in `output`.
        save_every: steps between saves of the resume state.
        overwrite: start afresh even if `output` holds another run.
        log: prints progress lines.
        chief: whether this process writes (`run.json`, the resume state); the
            other processes of a distributed run only read, after it.

    Example:

    >>> import tempfile, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> data = tf.data.Dataset.from_tensors((np.ones((4, 2)), np.ones((4, 1)))).repeat()
    >>> run = ResumableRun(tempfile.mkdtemp(), {"seed": 0}, total_steps=5, save_every=2, log=None)
    >>> history = run.fit(model, data, steps_per_epoch=5, verbose=0)
    >>> run.step, int(model.optimizer.iterations)
    (5, 5)
    """

    def __init__(self, output, arguments, total_steps, outputs=(), save_every=DEFAULT_SAVE_EVERY,
                 overwrite=False, log=print, chief=True):
        super().__init__()
        if int(total_steps) < 1 or int(save_every) < 1:
            raise ValueError(f"total_steps and save_every must be positive (received {total_steps}, {save_every}).")
        self.output, self.total_steps, self.save_every = output, int(total_steps), int(save_every)
        self.outputs = tuple(outputs)
        self.arguments = json.loads(json.dumps(arguments))
        self.log = log or (lambda line: None)
        self.chief = chief
        if chief:
            self._check_folder()
        self._check_arguments(outputs, overwrite)
        self.step, self._elapsed, self.losses = self._saved_state()
        self._epoch_mean = 0.0
        self._start = time.time()
        self._signal, self._handlers, self._framework_state = None, {}, None

    @property
    def resume_state_path(self):
        """Where the resume state is written."""
        return os.path.join(self.output, RESUME_STATE_FILE)

    def _saved_resume_state(self):
        """The path of the resume state to read (an earlier run's `checkpoint.npz` too); None without one."""
        for name in (RESUME_STATE_FILE, EARLIER_RESUME_STATE_FILE):
            if os.path.exists(os.path.join(self.output, name)):
                return os.path.join(self.output, name)
        return None

    def _remove(self, *names):
        for path in (os.path.join(self.output, name) for name in names):
            if os.path.exists(path):
                os.remove(path)

    def _check_folder(self):
        check_output(self.output)
        try:
            os.makedirs(self.output, exist_ok=True)
        except OSError as error:
            raise ValueError(f"--output {self.output} cannot be created: {error.strerror}.") from None
        _probe(self.output, _PROBE_BYTES)
        for leftover in glob.glob(os.path.join(glob.escape(self.output), "*.tmp-*")):
            os.remove(leftover)  # a save that a kill -9 cut short

    def _check_arguments(self, outputs, overwrite):
        """Refuse a folder whose files come from a run with other arguments, or remove them (`overwrite`)."""
        run_file = os.path.join(self.output, RUN_FILE)
        kept = [name for name in (RESUME_STATE_FILE, EARLIER_RESUME_STATE_FILE, *outputs)
                if os.path.exists(os.path.join(self.output, name))]
        if overwrite and self.chief:
            for path in (os.path.join(self.output, name) for name in (RUN_FILE, *kept)):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                elif os.path.exists(path):
                    os.remove(path)
        elif kept and not os.path.exists(run_file):
            raise ValueError(f"--output {self.output} holds {', '.join(kept)} of an earlier run whose arguments "
                             "are not recorded; pass --overwrite to start afresh, or choose another --output.")
        elif kept:
            with open(run_file, encoding="utf-8") as f:
                previous = json.load(f)["arguments"]
            names = sorted(set(previous) | set(self.arguments))
            differing = [f"{_option(name)} {previous.get(name)} (now {self.arguments.get(name)})"
                         for name in names if previous.get(name) != self.arguments.get(name)]
            if differing:
                raise ValueError(f"--output {self.output} holds a run with other arguments: {', '.join(differing)}; "
                                 "pass --overwrite to start afresh, or choose another --output.")
        if not self.chief:
            return
        record = json.dumps({"arguments": self.arguments}, indent=2).encode()
        _write_atomically(run_file, lambda f: f.write(record))

    def _saved_state(self):
        """`(step, elapsed seconds, losses)` of the resume state, `(0, 0.0, [])` without one."""
        path = self._saved_resume_state()
        if path is None:
            return 0, 0.0, []
        with np.load(path) as saved:
            state = json.loads(str(saved["state"]))
        return state["step"], state["elapsed_seconds"], state["losses"]

    @property
    def complete(self):
        """Whether `output` holds this run finished: every one of its `outputs` written, no resume state left."""
        written = all(os.path.exists(os.path.join(self.output, name)) for name in self.outputs)
        return bool(self.outputs) and written and self._saved_resume_state() is None

    def elapsed_seconds(self):
        """Wall time of the whole run so far, the earlier parts of a resumed run included."""
        return self._elapsed + time.time() - self._start

    def fit(self, model, dataset, steps_per_epoch, callbacks=(), prepare=None, **options):
        """`model.fit` on `dataset` (a repeating `tf.data` stream, the same on every rerun) from `step`.

        Epochs are `steps_per_epoch` steps; the batches before `step` are
        skipped. `prepare(model)`, if given, runs once the model is built,
        before it trains. `options` go to `fit` (e.g. `verbose`).
        """
        epochs = math.ceil(self.total_steps / steps_per_epoch)
        # Build the model, its loss and metrics first (`epochs=0`), so that the `fit` below opens one
        # iterator only: a seeded shuffle draws its next order per iterator it opens.
        model.fit(dataset, epochs=0, steps_per_epoch=1, shuffle=False, verbose=0)
        if prepare is not None:
            prepare(model)
        if self.step:
            self.log(f"Resuming from the saved state at step {self.step} of {self.total_steps}.")
        with self._signals_caught():
            return model.fit(dataset.skip(self.step), epochs=epochs, steps_per_epoch=steps_per_epoch,
                             initial_epoch=self.step // steps_per_epoch, callbacks=[self, *callbacks],
                             shuffle=False, **options)

    def finish(self):
        """Remove the resume state: the run is complete (its arguments stay recorded)."""
        if self.chief:
            self._remove(RESUME_STATE_FILE, EARLIER_RESUME_STATE_FILE)

    def _variables(self):
        return [*self.model.variables, *self.model.optimizer.variables]

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        if not optimizer.built:  # TensorFlow builds it at the first step
            optimizer.build(self.model.trainable_variables)
        variables = self._variables()
        if self.chief:
            _probe(self.output, 4 * sum(int(np.prod(v.shape)) for v in variables))  # the resume state's size
        if not self.step:
            return
        path = self._saved_resume_state()
        with np.load(path) as saved:
            values = [saved[f"v{i}"] for i in range(len(variables))]
            framework_state = saved["framework_random_state"]
        if [tuple(v.shape) for v in variables] != [value.shape for value in values]:
            raise ValueError(f"{path} does not fit this model; pass --overwrite to start afresh.")
        for variable, value in zip(variables, values):
            variable.assign(value)
        self._framework_state = framework_state

    def on_train_batch_begin(self, batch, logs=None):
        if self._framework_state is not None:  # now: opening the data iterator draws from it (PyTorch)
            set_framework_random_state(self._framework_state)
            self._framework_state = None

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self._check_losses(logs or {})
        self._record_loss(batch, (logs or {}).get("loss"))
        if self.step >= self.total_steps:
            self.model.stop_training = True
        elif self.chief and (self.step % self.save_every == 0 or self._signal):
            self._save()
        if self._signal:
            self._stop_for_signal()

    def _check_losses(self, logs):
        for name, value in logs.items():
            if name.endswith("loss") and not math.isfinite(float(value)):
                raise FloatingPointError(
                    f"The {name} is {float(value)} at step {self.step}: training stopped (the last resume state "
                    "is kept). Lower the learning rate, or check the data.")

    def _record_loss(self, batch, epoch_mean):
        """Append the step's own loss to `losses`, from Keras' running mean over the epoch's batches."""
        if epoch_mean is None:
            return
        epoch_mean = float(epoch_mean)
        self.losses.append(epoch_mean if batch == 0 else (batch + 1) * epoch_mean - batch * self._epoch_mean)
        self._epoch_mean = epoch_mean

    def _save(self):
        arrays = {f"v{i}": host_numpy(v) for i, v in enumerate(self._variables())}
        arrays["framework_random_state"] = framework_random_state()
        state = {"step": self.step, "elapsed_seconds": self.elapsed_seconds(), "losses": self.losses}
        arrays["state"] = np.array(json.dumps(state))
        _write_atomically(self.resume_state_path, lambda f: np.savez(f, **arrays))
        self._remove(EARLIER_RESUME_STATE_FILE)

    def _stop_for_signal(self):
        saved = "saved the resume state" if self.step < self.total_steps else "the training was complete"
        self.log(f"\n{signal.Signals(self._signal).name} at step {self.step}: {saved}; rerun the same "
                 "command to resume.")
        self._restore_handlers()
        signal.raise_signal(self._signal)

    @contextlib.contextmanager
    def _signals_caught(self):
        """SIGINT and SIGTERM stop the run at the end of the step, after saving the resume state.

        A signal the process ignores (SIGINT in a background job, `nohup`) stays ignored.
        """
        self._handlers = {}
        if threading.current_thread() is threading.main_thread():
            self._handlers = {number: signal.signal(number, self._on_signal) for number in _CAUGHT_SIGNALS
                              if signal.getsignal(number) is not signal.SIG_IGN}
        try:
            yield
        finally:
            self._restore_handlers()

    def _on_signal(self, number, frame):
        if self._signal:  # a second signal: stop now, without waiting for the step
            self._restore_handlers()
            signal.raise_signal(number)
        self._signal = number

    def _restore_handlers(self):
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        self._handlers = {}

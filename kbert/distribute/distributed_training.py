"""`DistributedTraining`: how `kbert pretrain` and `kbert finetune` train over devices and processes."""

import contextlib
import json
import os
import re
import sys

import keras

from kbert.backend.ops import host_numpy
from kbert.backend.private_state import clear_variable_layout

from kbert.backend.imports import quiet_import, traced_as_written
from kbert.distribute.engines import default_strategy, device_mesh, get_distribution, jit_compile_for, layout_map

MODES = ("none", "data", "model")
KERAS_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                   "KERAS_DISTRIBUTION_PROCESS_ID")
# How long a process waits for the others at a collective before it stops (a lost process).
DEFAULT_TIMEOUT_SECONDS = 60
MULTI_WORKER_ISSUE = "https://github.com/keras-team/keras/issues/20585"
# How a collective fails when its peer process is gone (gloo's and NCCL's words).
_LOST_PEER = re.compile(r"gloo|nccl|connection (reset|closed|refused)|peer|socket|heartbeat", re.IGNORECASE)
LOST_PROCESS_STATUS = 3


def _keras_processes():
    """The `KERAS_DISTRIBUTION_*` processes `(count, index)`, `None` unset; incomplete raises."""
    given = [name for name in KERAS_VARIABLES if os.environ.get(name)]
    if not given:
        return None
    if len(given) < len(KERAS_VARIABLES):
        missing = [name for name in KERAS_VARIABLES if name not in given]
        raise ValueError(f"{', '.join(given)} set but {', '.join(missing)} not: set all three "
                         "KERAS_DISTRIBUTION_* variables on every process, or none.")
    try:
        count, index = int(os.environ[KERAS_VARIABLES[1]]), int(os.environ[KERAS_VARIABLES[2]])
    except ValueError:
        raise ValueError("KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID must be "
                         "integers.") from None
    if not 0 <= index < count:
        raise ValueError(f"KERAS_DISTRIBUTION_PROCESS_ID={index} is outside [0, {count}).")
    return count, index


def _tensorflow_workers():
    """The workers `TF_CONFIG` names (1 without it)."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    except json.JSONDecodeError:
        raise ValueError("TF_CONFIG is not JSON.") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


class DistributedTraining:
    """Where a job trains: `none` (one device), `data` or `model` parallel, on the backend's own engine.

    - JAX: `keras.distribution` over every device of every process; the
      processes join with `keras.distribution.initialize()` from the
      `KERAS_DISTRIBUTION_*` variables (gloo collectives on CPUs). `data` is
      a `DataParallel`, `model` a `ModelParallel` with kbert's Megatron
      `layout_map` over a `"model"` axis of `model_parallel` devices.
    - PyTorch: the processes `torchrun` starts, joined by
      `torch.distributed`, each training through `DistributedDataParallel`.
    - TensorFlow: `default_strategy()` (`TPUStrategy` on a TPU,
      `MirroredStrategy` over local GPUs). Several workers (`TF_CONFIG`) are
      refused: Keras 3 cannot `fit` under `MultiWorkerMirroredStrategy`.

    `batch_size` is the global batch: each process reads its own rows of
    every batch of the same seeded stream (`shard`). Process 0 (`chief`)
    alone writes. `mode=None` picks `data` when there are several devices
    or processes, else `none`. Create it first: JAX processes must join
    before any computation.

    Raises:
        ValueError: an unknown mode; a global batch the replicas do not
            divide; a model-parallel size that does not divide the devices
            (or, in `scope`, the heads and widths); `KERAS_DISTRIBUTION_*`
            set but incomplete; several TensorFlow workers.

    >>> training = DistributedTraining(batch_size=8)
    >>> training.processes, training.chief
    (1, True)
    """

    def __init__(self, mode=None, model_parallel=1, batch_size=1, timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
        if mode not in (None, *MODES):
            raise ValueError(f"Unknown --distribute {mode!r}; expected one of {', '.join(MODES)}.")
        if int(model_parallel) < 1 or (int(model_parallel) > 1 and mode not in (None, "model")):
            raise ValueError(f"--model-parallel {model_parallel} needs --distribute model and a size of at least 1.")
        self.backend = keras.backend.backend()
        self.model_parallel = int(model_parallel)
        self.processes, self.process_index, self.strategy = 1, 0, None
        self._join(timeout_seconds)
        devices = self._device_count(mode)
        default = "model" if self.model_parallel > 1 else "data" if devices > 1 or self.processes > 1 else "none"
        self.mode = mode or default
        self._check_mode(devices)
        if self.mode == "model":
            self.mesh = device_mesh(self.model_parallel)  # raises unless it divides the devices
        self.replicas = self._replicas(devices)
        if batch_size % self.replicas:
            raise ValueError(f"The global batch size {batch_size} is not divisible by the {self.replicas} "
                             f"data-parallel replicas; give a multiple of {self.replicas}.")
        self.batch_size = batch_size

    @property
    def chief(self):
        """Whether this is process 0, the one that writes the outputs and logs."""
        return self.process_index == 0

    def _join(self, timeout_seconds):
        """Join the other processes, if the launcher started several."""
        keras_processes = _keras_processes()
        if self.backend == "jax" and keras_processes and keras_processes[0] > 1:
            import jax

            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            keras.distribution.initialize()
            self.processes, self.process_index = jax.process_count(), jax.process_index()
        elif self.backend == "torch" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from kbert.distribute.torch_data_parallel import join_process_group

            self.processes, self.process_index = join_process_group(timeout_seconds)
        elif keras_processes and keras_processes[0] > 1:
            raise ValueError(f"KERAS_DISTRIBUTION_* joins JAX processes; this is {self.backend} (for PyTorch, "
                             "start the processes with torchrun).")

    def _device_count(self, mode):
        if self.backend == "jax":
            return len(keras.distribution.list_devices())
        if self.backend == "tensorflow":
            if _tensorflow_workers() > 1:
                raise ValueError(f"Several TensorFlow workers (TF_CONFIG): Keras 3 cannot fit under "
                                 f"MultiWorkerMirroredStrategy ({MULTI_WORKER_ISSUE}); run several hosts "
                                 "with KERAS_BACKEND=jax (KERAS_DISTRIBUTION_*) or torch (torchrun).")
            if mode == "none":  # no strategy: no TPU system or GPUs set up
                return 1
            self.strategy = default_strategy()
            return self.strategy.num_replicas_in_sync
        return self.processes  # PyTorch: one device per process

    def _check_mode(self, devices):
        if self.mode == "model" and self.backend != "jax":
            raise ValueError(f"--distribute model shards with keras.distribution, on KERAS_BACKEND=jax; this is "
                             f"{self.backend}.")
        if self.mode == "model" and self.processes > 1:
            raise ValueError("--distribute model runs in one process (over its devices); use --distribute data "
                             "across processes.")
        if self.mode == "model" and self.model_parallel == 1:
            raise ValueError("--distribute model needs --model-parallel N, N > 1 devices per model.")
        if self.mode == "none" and self.processes > 1:
            raise ValueError(f"--distribute none with {self.processes} processes: each would train alone; "
                             "use --distribute data.")

    def _replicas(self, devices):
        if self.mode == "none":
            return 1
        if self.mode == "model":
            return devices // self.model_parallel
        return devices

    @property
    def jit_compile(self):
        """`model.compile`'s `jit_compile`: what works under a multi-device TensorFlow strategy, else Keras' "auto"."""
        several = self.strategy is not None and self.mode != "none" and self.replicas > 1
        return jit_compile_for(self.strategy) if several else "auto"

    def distribution(self, model_or_name):
        """The JAX `keras.distribution.Distribution` for `model_or_name` (a preset name or a built model), or None."""
        if self.backend != "jax" or self.mode == "none":
            return None
        if self.mode == "model":
            layout_map(model_or_name, self.mesh)  # a clear error for heads or widths the axis does not divide
        return get_distribution(self.model_parallel if self.mode == "model" else 1, model_or_name,
                                auto_shard_dataset=False)

    @contextlib.contextmanager
    def scope(self, model_or_name):
        """Build, compile and train under this: the JAX distribution or the TensorFlow strategy.

        A collective that fails because another process is gone ends this
        process (`LOST_PROCESS_STATUS`) with one line naming the lost process.
        """
        distribution = self.distribution(model_or_name)
        if distribution is not None:
            context = distribution.scope()
        elif self.strategy is not None and self.mode != "none":
            context = self.strategy.scope()
        else:
            context = contextlib.nullcontext()
        with context, self._lost_processes_stop():
            yield

    @contextlib.contextmanager
    def _lost_processes_stop(self):
        try:
            yield
        except (ValueError, FloatingPointError, KeyboardInterrupt):
            raise
        except Exception as error:
            if self.processes == 1 or not _LOST_PEER.search(str(error)):
                raise
            lost = f"process {1 - self.process_index}" if self.processes == 2 else "another process"
            reason = str(error).strip().splitlines()[0][:200]
            print(f"\nkbert: lost {lost} of {self.processes} (this is process {self.process_index}): {reason}; "
                  "rerun the same command on every process to resume from the last saved state.", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(LOST_PROCESS_STATUS)  # a normal exit would wait for the lost process at shutdown

    def distributed_copy(self, backbone):
        """`backbone` rebuilt under `scope` (its variables laid out for the devices), with its weights."""
        if self.backend != "jax" or self.mode == "none":
            return backbone
        with self.scope(backbone):
            copy = type(backbone).from_config(backbone.get_config())
        copy.set_weights(backbone.get_weights())
        return copy

    def shard(self, dataset):
        """This process's rows of each global batch of `dataset` (a batched `tf.data.Dataset`)."""
        if self.processes == 1:
            return dataset
        tf = quiet_import("tensorflow")
        index, count = self.process_index, self.processes

        def rows(*batch):
            def own(tensor):
                size = tf.shape(tensor)[0] // count
                return tensor[index * size:(index + 1) * size]

            return tf.nest.map_structure(own, batch if len(batch) > 1 else batch[0])

        return dataset.map(traced_as_written(rows))

    def check_last_batch(self, examples):
        """Refuse `examples` whose last partial batch the replicas cannot split evenly."""
        last = examples % self.batch_size
        if self.replicas > 1 and last % self.replicas:
            raise ValueError(f"The last batch of an epoch holds {last} of the {examples} training examples, not "
                             f"divisible by the {self.replicas} replicas; choose a --batch-size that leaves a "
                             f"multiple of {self.replicas} (or none).")

    def prepare(self, model):
        """Called once `model` is built, before it trains: PyTorch processes train it through DDP."""
        if self.backend == "torch" and self.processes > 1:
            from kbert.distribute.torch_data_parallel import use_distributed_data_parallel

            use_distributed_data_parallel(model)

    def localize(self, model):
        """After training: every variable of `model` (and its optimizer) whole on this process's default device.

        The evaluation, demo and save then run on each process alone, as on
        one device (JAX; a no-op elsewhere).
        """
        if self.backend != "jax" or self.mode == "none":
            return
        variables = [*model.variables, *(model.optimizer.variables if model.optimizer else ())]
        for variable in variables:
            value = host_numpy(variable)
            clear_variable_layout(variable)  # Keras' JAX variable re-shards an assigned value by its layout
            variable.assign(value)

    def chief_first(self, create):
        """`create(chief)` on process 0 first, then (once it returned) on the others: what writes, then what reads."""
        result = create(True) if self.chief else None
        self.barrier()
        return result if self.chief else create(False)

    def log(self, log):
        """`log` on process 0; a silent one on the others."""
        return log if self.chief and log else (lambda line: None)

    def barrier(self):
        """Wait until every process reaches this point."""
        if self.processes == 1:
            return
        if self.backend == "torch":
            import torch.distributed as dist

            dist.barrier()
        else:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("kbert")

    def describe(self):
        """One line: the mode, replicas and processes (for the job's log)."""
        if self.mode == "none":
            return "on one device"
        where = f"{self.processes} processes" if self.processes > 1 else "one process"
        axis = f", model axis {self.model_parallel}" if self.mode == "model" else ""
        return f"{self.mode}-parallel over {self.replicas} replicas{axis} in {where}"

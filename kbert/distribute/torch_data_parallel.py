"""PyTorch's engine for the jobs: processes joined by `torch.distributed`, `DistributedDataParallel`.

`torchrun --nproc-per-node N -m kbert pretrain ...` starts the processes and
sets `WORLD_SIZE`, `RANK`, `MASTER_ADDR` and `MASTER_PORT`;
`join_process_group` joins them (gloo on CPUs, nccl on GPUs).
`use_distributed_data_parallel` makes a compiled Keras model's own `fit` train
through `DistributedDataParallel`: its forward pass goes through the DDP
wrapper, so `backward()` all-reduces (averages) the gradients bucket by
bucket while it runs, and every process applies the same update.
"""

import datetime
import os

import keras

from kbert.backend.private_state import call_takes_training, compute_loss_of_step, loss_tracker


def join_process_group(timeout_seconds):
    """Join the `torchrun` processes (`RANK` of `WORLD_SIZE`); a collective waits at most `timeout_seconds`."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_seconds))
    return dist.get_world_size(), dist.get_rank()


def _global_mean(loss):
    """The processes' mean of `loss` as its value; its gradient stays this process's own."""
    import torch.distributed as dist

    total = loss.detach().clone()
    dist.all_reduce(total)
    return loss + (total / dist.get_world_size() - loss.detach())


def use_distributed_data_parallel(model):
    """Make `model.fit` train through `DistributedDataParallel` (every process calls it, after `compile`).

    DDP first broadcasts process 0's weights. The training step is Keras'
    own for PyTorch (`keras/src/backend/torch/trainer.py`), with the forward
    pass through the DDP wrapper and the loss reported as the processes'
    mean; the metrics are each process's own shard's.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
    # Unused parameters (a pooler an objective does not read) would otherwise stall the all-reduce.
    parallel = DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=True,
                                       broadcast_buffers=False)

    def train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = parallel(x, training=True) if call_takes_training(model) else parallel(x)
        model.zero_grad()
        loss = _global_mean(compute_loss_of_step(model, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                                 training=True))
        rows = next(t for t in keras.tree.flatten(x) if t is not None).shape[0]
        loss_tracker(model).update_state(loss, sample_weight=rows)
        model.optimizer.scale_loss(loss).backward()
        variables = model.trainable_weights[:]
        with torch.no_grad():
            model.optimizer.apply([v.value.grad for v in variables], variables)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    model.train_step = train_step  # Keras' step calls `self.train_step` each time
    return parallel

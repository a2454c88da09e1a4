"""Run the same kbert model where the hardware is: several devices, several processes, TPUs.

Each backend's own engine does the work: `keras.distribution` (JAX),
`tf.distribute` (TensorFlow), `torch.distributed` with
`DistributedDataParallel` (PyTorch). `engines` picks and configures them
(`default_strategy`, `get_distribution`, the Megatron `layout_map`);
`DistributedTraining` is what `kbert pretrain` and `kbert finetune` use:
the `--distribute none|data|model` mode, the processes, each one's shard of
the global batch. docs/architecture.md describes the layer.
"""

from kbert.distribute.distributed_training import DistributedTraining
from kbert.distribute.engines import (
    BATCH_AXIS,
    MODEL_AXIS,
    SHARDING_RULES,
    default_strategy,
    device_mesh,
    get_distribution,
    jit_compile_for,
    layout_map,
)

__all__ = ["BATCH_AXIS", "MODEL_AXIS", "SHARDING_RULES", "DistributedTraining", "default_strategy",
           "device_mesh", "get_distribution", "jit_compile_for", "layout_map"]

"""The learning side: datasets and partitions, model architectures, and the training engine.

Nothing here knows about simulated time; the simulator calls in with flat parameter vectors.
"""

from fedsim.learn.data import ClientShard, FederatedDataset, build_federated_dataset
from fedsim.learn.datasets import DATASET_NAMES, load_pool
from fedsim.learn.execution import configure_threads
from fedsim.learn.models import MODEL_NAMES, build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.partitions import (
    PARTITION_NAMES,
    partition_dirichlet,
    partition_iid,
    partition_label_groups,
)
from fedsim.learn.trainer import EvalResult, Trainer, TrainResult

__all__ = [
    "DATASET_NAMES",
    "MODEL_NAMES",
    "PARTITION_NAMES",
    "ClientShard",
    "EvalResult",
    "FederatedDataset",
    "OptimizerSpec",
    "TrainResult",
    "Trainer",
    "build_federated_dataset",
    "build_model",
    "configure_threads",
    "load_pool",
    "partition_dirichlet",
    "partition_iid",
    "partition_label_groups",
]

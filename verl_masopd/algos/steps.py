"""What an estimator's preparation and finishing steps (declared in its spec, specs.py) share.

batch_field(data, name, estimator)   a batch field, or a ValueError naming it and the estimator
Finished                             the finishing step's result: advantages and returns [B, R],
                                     the rows that enter the loss [B] (None: all) and metrics
"""

from dataclasses import dataclass, field
from typing import Any

import torch
from verl import DataProto


def batch_field(data: DataProto, name: str, estimator: str) -> Any:
    """`data`'s tensor or non-tensor field `name`; a missing field is named with the estimator."""
    if name in data.batch.keys():
        return data.batch[name]
    if name in data.non_tensor_batch:
        return data.non_tensor_batch[name]
    raise ValueError(f"algorithm.adv_estimator={estimator} needs the batch field {name!r}, which is missing")


@dataclass
class Finished:
    advantages: torch.Tensor
    returns: torch.Tensor
    trainable: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)

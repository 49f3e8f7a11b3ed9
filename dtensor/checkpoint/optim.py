"""Optimizer state before a load: torch's optimizers create their state (``exp_avg``, ...)
at the first ``step()``, so a fresh optimizer's ``state_dict()`` has nothing to load into.

>>> import torch
>>> p = torch.nn.Parameter(torch.ones(2))
>>> opt = torch.optim.AdamW([p], lr=0.1)
>>> init_optimizer_state(opt)
>>> sorted(opt.state_dict()["state"][0]), p.tolist()
(['exp_avg', 'exp_avg_sq', 'step'], [1.0, 1.0])
"""

from __future__ import annotations

import torch


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create ``optimizer``'s state in its layout (DTensor moments keep their parameters'
    placements) by one step with zero gradients at learning rate 0, as
    torch.distributed.checkpoint does; the parameters are not changed (for optimizers whose
    update is scaled by the learning rate: SGD, Adam, AdamW, ...). A no-op if the state
    exists. Then ``state = {"optim": optimizer.state_dict()}``, ``load(state, path)``,
    ``optimizer.load_state_dict(state["optim"])``."""
    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(p.grad is not None for p in params):
        raise ValueError("init_optimizer_state: parameters already have gradients; expected "
                         "a fresh optimizer (call it before training, or after zero_grad())")
    lrs = []
    for g in optimizer.param_groups:
        lrs.append(g["lr"])
        g["lr"] = torch.tensor(0.0) if isinstance(g["lr"], torch.Tensor) else 0.0
    try:
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, lrs):
            g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)

"""Tests of dtensor.parallel: fully_shard, tensor-parallel styles, loss and context parallel."""

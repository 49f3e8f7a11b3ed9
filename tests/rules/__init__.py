"""Tests of the sharding rules (dtensor/ops/): one file per rule module, plus propagation.
Shared cases, meshes and the soundness-test factory: tests/support/cases.py."""

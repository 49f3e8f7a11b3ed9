"""Tests of dtensor.redistribute: the planner, the executors, cross-mesh moves, compiled plans."""

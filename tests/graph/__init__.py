"""Tests of dtensor.graph: capture, annotation, the sharding search and its costs, expansion."""

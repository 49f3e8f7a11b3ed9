"""Tests of dtensor.comm: the collectives layer and its CommDebugMode."""

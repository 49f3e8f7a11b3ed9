"""Tests of dtensor.checkpoint: saving, loading in another layout, stores, faults, interop."""

"""Tests of dtensor.dispatch: the fast path, the native entry, relocation, inference mode."""

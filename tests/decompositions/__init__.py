"""Tests of dtensor.decompositions: ops computed from others on DTensors (norms, random ops)."""

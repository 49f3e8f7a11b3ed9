"""Tests of dtensor, simpg, the benchmarks and the examples; the folders mirror the source."""

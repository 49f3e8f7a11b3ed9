"""Smoke tests of benchmarks/: each script at tiny sizes, and the README figures they write."""

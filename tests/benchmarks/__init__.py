"""Smoke tests of benchmarks/: each script at tiny sizes, its conditions lines, run_all."""

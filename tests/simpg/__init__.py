"""Tests of simpg, the process-group simulator: one file per simpg module or concern."""

"""Sharding rules: matmul (being written)."""

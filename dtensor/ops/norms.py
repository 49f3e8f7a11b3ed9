"""Sharding rules: norms (being written)."""

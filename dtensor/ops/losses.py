"""Sharding rules: losses (being written)."""

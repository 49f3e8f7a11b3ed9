"""Sharding rules: misc (being written)."""

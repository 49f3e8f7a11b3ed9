"""Runnable programs and the in-project models (``examples.models``)."""

"""Fault scenarios: sizes for the CI quick part and for the soak (``-m soak``)."""

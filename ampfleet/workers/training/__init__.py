"""Distributed mixed-precision training: one process per rank, launched by torchrun."""

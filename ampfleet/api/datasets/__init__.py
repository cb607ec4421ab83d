"""Datasets: named, versioned, content-addressed inputs of jobs."""

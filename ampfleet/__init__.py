"""ampfleet: training-as-a-service backend."""

__version__ = "0.1.0"

"""The sweeps resource: hyperparameter and precision searches whose trials are jobs."""

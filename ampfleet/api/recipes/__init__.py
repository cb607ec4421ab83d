"""The recipes resource: what is installed, and what each one's hyperparameters accept."""

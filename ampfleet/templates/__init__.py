"""What `ampfleet init` writes: a recipe project that runs as it is (see project.py)."""

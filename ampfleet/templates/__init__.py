"""What `ampfleet init` writes: a recipe project that runs as it is (see project.py), or with
`--script` a training script's project (script_project.py)."""

"""The Slurm compute backend: a pool of ampfleet's placement whose jobs run as Slurm batch jobs,
submitted, watched and cancelled through slurmrestd (see backend.py)."""

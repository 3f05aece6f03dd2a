"""Submit RLlib jobs to a Ray cluster on Azure (or to local Ray) and bring the results back."""

__version__ = "0.1.0"

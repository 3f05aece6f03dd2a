"""Submit RLlib jobs to a Ray cluster on Azure (or to local Ray) and bring the results back."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("azure-ray-rl")
except PackageNotFoundError:  # pragma: no cover - run from a source tree without installing
    __version__ = "0+unknown"

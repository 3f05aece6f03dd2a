"""Submit RLlib jobs to a Ray cluster on Azure (or to local Ray) and bring the results back."""


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed package's metadata when first asked for
    (importlib.metadata costs more than the rest of a short command's start-up)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    from driver.package import DISTRIBUTION

    try:
        value = version(DISTRIBUTION)
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without installing
        value = "0+unknown"
    globals()["__version__"] = value
    return value

"""Where built assets live: one cache directory, overridable by HEDGESPEC_CACHE."""
import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of everything the project builds (converted target, corpora, drafter pool)."""
    return Path(os.environ.get("HEDGESPEC_CACHE", Path.home() / ".cache" / "hedgespec"))

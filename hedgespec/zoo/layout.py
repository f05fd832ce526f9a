"""Where the offline pool lives: everything under <cache>/zoo, the paths configs/pool.yaml names."""
from pathlib import Path

from hedgespec.paths import cache_dir

BUNDLE = Path(__file__).parent / "bundled"  # the committed pool (hedgespec.zoo.bundle)
GENERAL = "general"  # the corpus the generalist head is trained on (never a domain's data)
ALL_DOMAINS = "all-domains"  # the head fine-tuned on every domain's data at once (a baseline)


def zoo_dir(cache: Path | None = None) -> Path:
    return Path(cache or cache_dir()) / "zoo"


def features_dir(name: str, cache: Path | None = None) -> Path:
    return zoo_dir(cache) / "features" / name


def head_path(name: str, cache: Path | None = None) -> Path:
    return zoo_dir(cache) / "heads" / f"{name}.safetensors"


def store_path(domain: str, cache: Path | None = None) -> Path:
    return zoo_dir(cache) / "datastores" / f"{domain}.npz"


def vocab_path(cache: Path | None = None) -> Path:
    return zoo_dir(cache) / "vocab.npy"


def checkpoint_path(name: str, cache: Path | None = None) -> Path:
    return zoo_dir(cache) / "checkpoints" / f"{name}.pt"

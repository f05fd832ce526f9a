"""The data layer: per-domain training corpora and evaluation prompts built from pinned registry
packages (``build``), and the readers the rest of the project uses."""
from .builder import build
from .domains import DOMAINS
from .leakage import LeakIndex, remove_leaks
from .prompts import data_dir, load_prompts, mixed_stream
from .sources import SOURCES, SourceError

__all__ = ["DOMAINS", "SOURCES", "LeakIndex", "SourceError", "build", "data_dir", "load_prompts",
           "mixed_stream", "remove_leaks"]

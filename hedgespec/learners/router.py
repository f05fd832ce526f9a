"""The static router baseline: an offline text classifier maps a prompt to a domain, and the query
is drafted by that domain's drafter throughout (it never looks at how the drafts fare).

The classifier is multinomial naive Bayes over hashed word unigrams and bigrams, trained on the
domains' training corpora (never on evaluation prompts): honest, fast to train (seconds), and as
brittle under rewording as the paper's BERT router, which is the point of the comparison.
"""
import re
import zlib
from pathlib import Path

import numpy as np

from hedgespec.data import DOMAINS
from hedgespec.data.text import read_jsonl
from hedgespec.feedback import RoundFeedback
from hedgespec.paths import cache_dir

BUCKETS = 1 << 18
WORDS_PER_DOCUMENT = 200
DOCUMENTS_PER_DOMAIN = 3000


def features(text: str) -> np.ndarray:
    words = re.findall(r"[a-z0-9_]+|[^\sa-z0-9_]", text.lower())
    grams = words + [a + " " + b for a, b in zip(words, words[1:])]
    return np.array([zlib.crc32(g.encode()) % BUCKETS for g in grams], dtype=np.int64)


class DomainClassifier:
    def __init__(self, domains: list[str], log_probs: np.ndarray, log_priors: np.ndarray):
        self.domains, self.log_probs, self.log_priors = domains, log_probs, log_priors

    @classmethod
    def fit(cls, texts: dict[str, list[str]], smoothing: float = 0.1) -> "DomainClassifier":
        domains = sorted(texts)
        counts = np.zeros((len(domains), BUCKETS))
        for d, domain in enumerate(domains):
            for text in texts[domain]:
                np.add.at(counts[d], features(" ".join(text.split()[:WORDS_PER_DOCUMENT])), 1)
        counts += smoothing
        log_probs = np.log(counts / counts.sum(1, keepdims=True)).astype(np.float32)
        # equal priors: corpus sizes say nothing about which domain a user's prompt is from
        return cls(domains, log_probs, np.full(len(domains), -np.log(len(domains))))

    def predict(self, text: str) -> str:
        scores = self.log_priors + self.log_probs[:, features(text)].sum(1)
        return self.domains[int(np.argmax(scores))]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, domains=np.array(self.domains), log_probs=self.log_probs.astype(np.float16),
                            log_priors=self.log_priors)

    @classmethod
    def load(cls, path: Path) -> "DomainClassifier":
        data = np.load(path)
        return cls([str(d) for d in data["domains"]], data["log_probs"].astype(np.float32), data["log_priors"])


def trained_classifier(cache: Path | None = None) -> DomainClassifier:
    """The classifier cached under the data it was trained on; trained (seconds) on first use."""
    cache = cache or cache_dir()
    path = cache / "router" / "classifier.npz"
    if path.exists():
        return DomainClassifier.load(path)
    corpora = {d: cache / "data" / d / "train.jsonl" for d in DOMAINS}
    missing = [str(p) for p in corpora.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(f"the router trains on the domain corpora; run `hedgespec data build` first (missing {missing[0]})")
    classifier = DomainClassifier.fit({d: [r["text"] for r in read_jsonl(p)[:DOCUMENTS_PER_DOMAIN]] for d, p in corpora.items()})
    classifier.save(path)
    return classifier


class RouterSelector:
    """The drafter of the predicted domain for the whole query; `fallback` where no route exists."""

    def __init__(self, n: int, classifier: DomainClassifier, routes: dict[str, int], fallback: int):
        assert all(0 <= i < n for i in [*routes.values(), fallback]), "route to a drafter outside the pool"
        self.classifier, self.routes, self.fallback = classifier, routes, fallback
        self.name = "router"
        self.index = fallback
        self.domain: str | None = None

    def begin(self, prompt_text: str) -> None:
        self.domain = self.classifier.predict(prompt_text)
        self.index = self.routes.get(self.domain, self.fallback)

    def choose(self, awake: np.ndarray | None) -> int:
        return self.index

    def observe(self, round: RoundFeedback) -> None:
        """A static router learns nothing online."""

    def end(self) -> None:
        """Nothing to keep."""

"""Per-domain datastores: the target's own answers on the domain (from the distillation shards of
the features, or from the committed bundle) and the domain's corpus text, as one suffix-array store
each."""
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hedgespec.drafters.store import Datastore
from hedgespec.zoo.features import shuffled_documents
from hedgespec.zoo.layout import store_path

BATCH_DOCS = 256  # documents per tokenizer call


def build_store(domain: str, answers: list[np.ndarray], tokenizer, max_corpus_tokens: int = 4_000_000, seed: int = 0,
                cache: Path | None = None, progress: bool = True) -> Path:
    """Builds <cache>/zoo/datastores/<domain>.npz from the target's `answers` on the domain and its
    corpus text, unless it exists; returns its path."""
    out = store_path(domain, cache)
    if out.exists():
        return out
    sequences = list(answers)
    docs, total = shuffled_documents(domain, seed, cache), 0
    bar = tqdm(total=max_corpus_tokens, desc=f"{domain}: datastore text", unit=" tok", disable=not progress)
    for b in range(0, len(docs), BATCH_DOCS):
        for ids in tokenizer(docs[b:b + BATCH_DOCS], add_special_tokens=False)["input_ids"]:
            ids = ids[:max_corpus_tokens - total]
            sequences.append(ids)
            total += len(ids)
            bar.update(len(ids))
        if total >= max_corpus_tokens:
            break
    bar.close()
    Datastore.build(sequences).save(out)
    return out

"""Target features for training EAGLE-style heads: one teacher-forced forward over a sequence gives
the target's last hidden state (after its final norm) at every position, and with it the target's
own next-token distribution there (its frozen output head applied to that state). Two kinds of
sequences per corpus:

- corpus: windows of the corpus text;
- distill: the target's own answers (greedy unless a temperature is set) to prompts made from
  other training documents. Drafters should imitate the target, not the corpus
  (docs/offline-assets.md: a few thousand tokens of the target's outputs beat millions of corpus).

Shards of fp16 features go to <cache>/zoo/features/<name>/. Each is written whole (temp file, then
rename), so an interrupted run redoes at most one shard and finished shards are skipped. The plan
(which documents, in which shards) is a pure function of the corpus and the settings, which are
recorded beside the shards; resuming with other settings is refused rather than mixed.
"""
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import GenerationConfig

from hedgespec.data.prompts import data_dir
from hedgespec.data.text import read_jsonl
from hedgespec.text import encode_prompt
from hedgespec.zoo.layout import features_dir

INSTRUCTIONS = ("Continue the following text.", "Explain the following.",
                "Summarize the following in a few sentences.", "What is this about? Answer briefly.")
PROMPT_CHARS = 800  # of document text in a distillation prompt; leaves the answer room in context


@dataclass(frozen=True)
class ExtractSettings:
    corpus_positions: int = 150_000  # per corpus, from windows of its text
    distill_prompts: int = 256  # per corpus; at most half of its documents
    answer_tokens: int = 128
    temperature: float = 0.0  # of the target's answers; 0 = greedy
    window: int = 512  # tokens per corpus sequence
    shard_positions: int = 16_384
    prompts_per_shard: int = 16  # also the generation batch
    batch: int = 4  # sequences per feature forward
    seed: int = 0


@dataclass
class Features:
    """Sequences of one corpus, concatenated: `hidden[i]` is the target's state at position i of its
    sequence, `tokens[i]` the token there; sequence s is [starts[s], starts[s+1]) and the target
    wrote its tokens from offset answers[s] on (its length for corpus text)."""
    tokens: np.ndarray  # int32 [n]
    hidden: np.ndarray | None  # float16 [n, H]; None when loaded without the states
    starts: np.ndarray  # int64 [S + 1]
    answers: np.ndarray  # int64 [S]

    def target_answers(self) -> list[np.ndarray]:
        """The token runs the target wrote itself."""
        return [self.tokens[a + off:b] for a, b, off in zip(self.starts[:-1], self.starts[1:], self.answers) if a + off < b]


def documents(name: str, cache: Path | None = None) -> list[str]:
    path = data_dir(cache) / name / "train.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: build the corpora with `hedgespec data build`")
    return [row["text"] for row in read_jsonl(path)]


def shuffled_documents(name: str, seed: int, cache: Path | None = None) -> list[str]:
    """The corpus in the fixed order every zoo step uses (a prefix is a random sample)."""
    docs = documents(name, cache)
    random.Random(f"{seed}/{name}").shuffle(docs)
    return docs


def extract(name: str, model, tokenizer, eos_ids: set[int], settings: ExtractSettings = ExtractSettings(),
            cache: Path | None = None, progress: bool = True) -> Path:
    """Features of corpus `name` (a domain or `general`); returns their folder."""
    out = features_dir(name, cache)
    _check_settings(out, settings)
    docs = shuffled_documents(name, settings.seed, cache)
    # the first documents become prompts, the rest corpus windows: no text is both
    n_prompts = min(settings.distill_prompts, len(docs) // 2)
    rng = random.Random(f"{settings.seed}/{name}/prompts")
    prompts = [encode_prompt(tokenizer, f"{rng.choice(INSTRUCTIONS)}\n\n{excerpt(doc)}") for doc in docs[:n_prompts]]
    windows = corpus_windows(tokenizer, docs[n_prompts:], settings.window, settings.corpus_positions)
    corpus_shards = _group(windows, settings.shard_positions)
    bar = tqdm(total=sum(map(len, windows)), desc=f"{name}: corpus features", unit=" pos", disable=not progress)
    for i, sequences in enumerate(corpus_shards):
        path = out / f"corpus-{i:05d}.npz"
        if not path.exists():
            save_shard(path, sequences, hidden_states(model, sequences, settings.batch), [len(s) for s in sequences])
        bar.update(sum(map(len, sequences)))
    bar.close()
    for i in tqdm(range(0, len(prompts), settings.prompts_per_shard), desc=f"{name}: target answers",
                  unit=" shard", disable=not progress):
        path = out / f"distill-{i // settings.prompts_per_shard:05d}.npz"
        if path.exists():
            continue
        batch = prompts[i:i + settings.prompts_per_shard]
        answers = generate(model, batch, settings.answer_tokens, eos_ids, settings.temperature, settings.seed + i)
        sequences = [p + a for p, a in zip(batch, answers)]
        save_shard(path, sequences, hidden_states(model, sequences, settings.batch), [len(p) for p in batch])
    return out


def excerpt(doc: str) -> str:
    """The beginning of a document, cut at a line break, as prompt material."""
    if len(doc) <= PROMPT_CHARS:
        return doc
    cut = doc.rfind("\n", 0, PROMPT_CHARS)
    return doc[:cut if cut > PROMPT_CHARS // 2 else PROMPT_CHARS]


def corpus_windows(tokenizer, docs: list[str], window: int, budget: int) -> list[list[int]]:
    """Consecutive windows of the documents' tokens until `budget` positions are collected."""
    windows, total = [], 0
    for doc in docs:
        ids = tokenizer.encode(doc, add_special_tokens=False)
        for start in range(0, len(ids), window):
            piece = ids[start:start + window]
            if len(piece) < 3:  # a head trains on (state, next token) -> next state: needs 3 tokens
                continue
            windows.append(piece)
            total += len(piece)
            if total >= budget:
                return windows
    return windows


def _group(sequences: list[list[int]], positions: int) -> list[list[list[int]]]:
    shards, current, size = [], [], 0
    for seq in sequences:
        current.append(seq)
        size += len(seq)
        if size >= positions:
            shards.append(current)
            current, size = [], 0
    return shards + ([current] if current else [])


@torch.inference_mode()
def hidden_states(model, sequences: list[list[int]], batch: int) -> list[np.ndarray]:
    """The target's last hidden state at every position of each sequence (fp16 [len, H])."""
    decoder = model.get_decoder()
    out: list[np.ndarray] = [None] * len(sequences)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))  # similar lengths batch together
    for b in range(0, len(order), batch):
        group = order[b:b + batch]
        width = max(len(sequences[i]) for i in group)
        # right padding needs no mask: under causal attention real positions never see the pads
        ids = torch.tensor([sequences[i] + [0] * (width - len(sequences[i])) for i in group], device=model.device)
        hidden = decoder(input_ids=ids).last_hidden_state
        for row, i in zip(hidden, group):
            out[i] = row[:len(sequences[i])].to(torch.float16).cpu().numpy()
    return out


@torch.inference_mode()
def generate(model, prompts: list[list[int]], max_tokens: int, eos_ids: set[int], temperature: float,
             seed: int) -> list[list[int]]:
    """The target's answers to a batch of prompts, each ending at its first EOS (kept) or at max_tokens."""
    pad = model.generation_config.pad_token_id
    pad = min(eos_ids) if pad is None else pad
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    # plain temperature sampling (no top-k / top-p cut) when sampling at all
    sampled = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {}
    config = GenerationConfig(max_new_tokens=max_tokens, eos_token_id=sorted(eos_ids), pad_token_id=pad, **sampled)
    torch.manual_seed(seed)
    answers = []
    for row in model.generate(input_ids=ids, attention_mask=mask, generation_config=config)[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        answers.append(row[:end])
    return answers


def save_shard(path: Path, sequences: list[list[int]], hidden: list[np.ndarray], answers: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        np.savez(f, tokens=np.concatenate([np.asarray(s, np.int32) for s in sequences]),
                 hidden=np.concatenate(hidden), starts=np.cumsum([0] + [len(s) for s in sequences]),
                 answers=np.asarray(answers, np.int64))
    partial.rename(path)


def load_features(*names: str, cache: Path | None = None, states: bool = True) -> Features:
    """Every shard of the named corpora, concatenated; `states=False` skips reading the hidden
    states (most of the bytes) when only the tokens are wanted."""
    keys = ("tokens", "hidden", "starts", "answers") if states else ("tokens", "starts", "answers")
    parts = [part for name in names for part in _shards(name, cache, keys)]
    offsets = np.cumsum([0] + [len(p["tokens"]) for p in parts])
    starts = np.concatenate([p["starts"][:-1] + o for p, o in zip(parts, offsets)] + [offsets[-1:]])
    hidden = np.concatenate([p["hidden"] for p in parts]) if states else None
    return Features(np.concatenate([p["tokens"] for p in parts]), hidden, starts, np.concatenate([p["answers"] for p in parts]))


def _shards(name: str, cache: Path | None, keys: tuple[str, ...]) -> list[dict]:
    paths = sorted(features_dir(name, cache).glob("*.npz"))
    if not paths:
        raise FileNotFoundError(f"no features for {name!r} in {features_dir(name, cache)}: run `hedgespec zoo build`")
    parts = []
    for path in paths:
        with np.load(path) as shard:
            parts.append({key: shard[key] for key in keys})
    return parts


def _check_settings(out: Path, settings: ExtractSettings) -> None:
    record = out / "settings.json"
    if record.exists() and json.loads(record.read_text()) != asdict(settings):
        raise ValueError(f"{out} holds features extracted with other settings ({record}); "
                         "remove the folder or extract with the same settings")
    out.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(asdict(settings), indent=1))

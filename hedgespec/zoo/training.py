"""Training an EAGLE-style head on extracted target features.

At entry j of a training window the head reads (target state f_j, token x_{j+1}) and predicts
f_{j+1}. Loss: SmoothL1 between the prediction and f_{j+1}, plus `ce_weight` x the cross-entropy of
the head's next-token distribution against the target's own (softmax of the frozen output head
over f_{j+1}), both on the draft vocabulary. The target's distribution is recomputed from the
stored state, so extraction never stores V-wide rows.

Whole sequences are held out (a few percent), so the held-out score measures text the head never
saw; training stops early once it stops improving and the best weights are saved. A checkpoint
after every evaluation lets an interrupted run resume; the fp16 head is written last.
"""
import copy
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from hedgespec.drafters.feature_head import FeatureHead, Frozen, HeadSpec, load_head, save_head
from hedgespec.zoo.features import Features


@dataclass(frozen=True)
class TrainSettings:
    max_minutes: float = 30.0  # of training time, summed over resumed runs
    max_steps: int = 100_000
    batch: int = 8  # windows per step
    window: int = 128  # entries per window
    lr: float = 5e-4
    ce_weight: float = 0.1
    eval_every: int = 100  # steps
    patience: int = 5  # evaluations without improvement before stopping
    holdout: float = 0.05  # share of sequences held out
    max_eval_windows: int = 64
    seed: int = 0


def draft_vocab(token_arrays: list[np.ndarray], vocab: int, size: int) -> np.ndarray:
    """The `size` most frequent token ids (ties: lower id first), sorted."""
    counts = sum(np.bincount(t, minlength=vocab) for t in token_arrays)
    return np.sort(np.argsort(-counts, kind="stable")[:min(size, vocab)])


def windows(features: Features, window: int, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) windows [start, end) of positions; held-out ones come from whole sequences."""
    n_seq = len(features.starts) - 1
    held = set(np.random.default_rng(seed).permutation(n_seq)[:math.ceil(n_seq * holdout)].tolist()) if n_seq > 1 else set()
    parts: tuple[list, list] = ([], [])
    for s in range(n_seq):
        a, b = int(features.starts[s]), int(features.starts[s + 1])
        for w in range(a, b - 2, window):  # a window of window+1 positions has `window` entries
            parts[s in held].append((w, min(w + window + 1, b)))
    return np.array(parts[0], np.int64).reshape(-1, 2), np.array(parts[1], np.int64).reshape(-1, 2)


def batch_of(features: Features, picked: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(states [B,T,H], next tokens [B,T], next states [B,T,H], mask [B,T]) for windows `picked`."""
    length = int((picked[:, 1] - picked[:, 0]).max()) - 1
    hidden = features.hidden.shape[1]
    states, targets = np.zeros((len(picked), length, hidden), np.float32), np.zeros((len(picked), length, hidden), np.float32)
    tokens, mask = np.zeros((len(picked), length), np.int64), np.zeros((len(picked), length), bool)
    for i, (a, b) in enumerate(picked):
        n = b - a - 1
        states[i, :n], targets[i, :n] = features.hidden[a:b - 1], features.hidden[a + 1:b]
        tokens[i, :n], mask[i, :n] = features.tokens[a + 1:b], True
    return tuple(torch.from_numpy(x) for x in (states, tokens, targets, mask))


def losses(head: FeatureHead, frozen: Frozen, batch: tuple[torch.Tensor, ...], ce_weight: float) -> tuple[torch.Tensor, int, int]:
    """(loss, positions where the head's argmax equals the target's, positions)."""
    states, tokens, targets, mask = batch
    predicted, _ = head(states, frozen.embedding(tokens), torch.arange(states.shape[1]))
    predicted, targets = predicted[mask], targets[mask]
    logits = predicted @ frozen.rows.T
    with torch.no_grad():
        target_logits = targets @ frozen.rows.T
    ce = -(target_logits.softmax(-1) * logits.log_softmax(-1)).sum(-1).mean()
    loss = F.smooth_l1_loss(predicted, targets) + ce_weight * ce
    return loss, int((logits.argmax(-1) == target_logits.argmax(-1)).sum()), len(targets)


@torch.no_grad()
def evaluate(head: FeatureHead, frozen: Frozen, features: Features, held: np.ndarray, settings: TrainSettings) -> dict:
    head.eval()
    total, agree, count = 0.0, 0, 0
    for b in range(0, min(len(held), settings.max_eval_windows), settings.batch):
        loss, hits, n = losses(head, frozen, batch_of(features, held[b:b + settings.batch]), settings.ce_weight)
        total, agree, count = total + float(loss) * n, agree + hits, count + n
    head.train()
    return {"loss": total / max(1, count), "top1": agree / max(1, count)}


def train_head(name: str, features: Features, frozen: Frozen, spec: HeadSpec, out: Path, checkpoint: Path,
               settings: TrainSettings, init: Path | None = None, final_norm: torch.Tensor | None = None,
               progress: bool = True) -> Path:
    """Trains head `name` (from `init`, or from scratch with its norm set to the target's
    `final_norm`) and saves it to `out` with a JSON report beside it; resumes from `checkpoint`."""
    head = load_head(init)[0] if init else FeatureHead(spec)
    if init is None and final_norm is not None:
        head.norm.weight.data.copy_(final_norm)
    head.train()
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=0.0)
    state = {"step": 0, "seconds": 0.0, "positions": 0, "best": None, "best_weights": None, "stale": 0, "history": []}
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        head.load_state_dict(saved.pop("weights"))
        optimizer.load_state_dict(saved.pop("optimizer"))
        state = saved
    train, held = windows(features, settings.window, settings.holdout, settings.seed)
    if not len(train) or not len(held):
        raise ValueError(f"{name}: too little data to train on ({len(train)} windows, {len(held)} held out)")

    def done() -> bool:
        return (state["step"] >= settings.max_steps or state["seconds"] >= settings.max_minutes * 60
                or state["stale"] >= settings.patience)

    bar = tqdm(total=settings.max_steps, initial=state["step"], desc=f"head {name}", unit=" step", disable=not progress)
    while not done():
        started = time.perf_counter()
        picked = train[np.random.default_rng([settings.seed, state["step"]]).integers(len(train), size=settings.batch)]
        loss, _, n = losses(head, frozen, batch_of(features, picked), settings.ce_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        state["step"] += 1
        state["positions"] += n
        state["seconds"] += time.perf_counter() - started
        bar.update(1)
        if state["step"] % settings.eval_every == 0 or done():
            scores = evaluate(head, frozen, features, held, settings)
            state["history"].append({"step": state["step"], **scores})
            bar.set_postfix(loss=f"{scores['loss']:.3f}", top1=f"{scores['top1']:.3f}")
            if state["best"] is None or scores["loss"] < state["best"]["loss"]:
                state["best"], state["best_weights"], state["stale"] = scores, copy.deepcopy(head.state_dict()), 0
            else:
                state["stale"] += 1
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save({**state, "weights": head.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)
    bar.close()
    head.load_state_dict(state["best_weights"])
    save_head(out, head, frozen.vocab)
    report = {"name": name, "init": str(init) if init else None, "steps": state["step"], "positions": state["positions"],
              "seconds": state["seconds"], "positions_per_s": state["positions"] / max(state["seconds"], 1e-9),
              "train_windows": len(train), "held_out_windows": len(held), "held_out": state["best"],
              "history": state["history"], "settings": asdict(settings)}
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    checkpoint.unlink()
    return out

"""The EAGLE-style feature head and the frozen target pieces it reads and writes through.

From the target's last hidden state at position i (after its final norm) and the embedding of
token i+1, the head predicts the target's hidden state at position i+1; the target's own output
head, restricted to a draft vocabulary, turns that prediction into a next-token distribution:

    concat(f_i, embed(x_{i+1})) -> Linear(2H -> H) -> one Llama decoder layer -> RMSNorm -> f^_{i+1}

The layer is written out here (rather than borrowing transformers' internals) so that its KV cache
is two plain tensors a drafter can slice back after rejected drafts. Heads are saved as fp16 (or
int8) safetensors with their draft vocabulary and shape inside, a few MB each.
"""
import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

KV = tuple[Tensor, Tensor]  # [1, kv_heads, length, head_dim] each
SCALE = ".int8_scale"  # suffix of the per-row scales of an int8 matrix in a saved head


@dataclass(frozen=True)
class HeadSpec:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    rope_theta: float

    @classmethod
    def of(cls, config) -> "HeadSpec":
        """The shape of a head for a target with this Hugging Face (Llama-like) config."""
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.hidden_size, config.num_attention_heads, config.num_key_value_heads, head_dim,
                   config.intermediate_size, float(config.rms_norm_eps), float(theta))


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary position embedding in the Llama (rotate-half) layout; x is [B, heads, T, head_dim]."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / theta ** (torch.arange(half, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], -1)
    cos, sin = angles.cos(), angles.sin()
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def attend(q: Tensor, k: Tensor, v: Tensor, positions: Tensor, past: KV | None, theta: float) -> tuple[Tensor, KV]:
    """Rotary attention of new queries [B, heads, T, d] over the cached keys and the new ones, causal
    and aligned to the end (query t sees every cached key and the new keys up to itself); returns
    the attended values and the grown cache."""
    length = q.shape[2]
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    if past is not None:
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    total = k.shape[2]
    mask = None if length == 1 else torch.arange(total) <= torch.arange(total - length, total)[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), (k, v)


class DecoderLayer(nn.Module):
    def __init__(self, spec: HeadSpec):
        super().__init__()
        self.spec = spec
        h, d = spec.hidden, spec.head_dim
        self.attn_norm = nn.RMSNorm(h, eps=spec.eps)
        self.q = nn.Linear(h, spec.heads * d, bias=False)
        self.k = nn.Linear(h, spec.kv_heads * d, bias=False)
        self.v = nn.Linear(h, spec.kv_heads * d, bias=False)
        self.o = nn.Linear(spec.heads * d, h, bias=False)
        self.mlp_norm = nn.RMSNorm(h, eps=spec.eps)
        self.gate = nn.Linear(h, spec.intermediate, bias=False)
        self.up = nn.Linear(h, spec.intermediate, bias=False)
        self.down = nn.Linear(spec.intermediate, h, bias=False)

    def forward(self, x: Tensor, positions: Tensor, past: KV | None) -> tuple[Tensor, KV]:
        """x [B, T, H] at `positions` [T], appended after `past` (which holds positions < positions[0])."""
        batch, length, _ = x.shape
        spec = self.spec
        h = self.attn_norm(x)
        q = self.q(h).view(batch, length, spec.heads, spec.head_dim).transpose(1, 2)
        k = self.k(h).view(batch, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        v = self.v(h).view(batch, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        attended, cache = attend(q, k, v, positions, past, spec.rope_theta)
        x = x + self.o(attended.transpose(1, 2).reshape(batch, length, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), cache


class FeatureHead(nn.Module):
    def __init__(self, spec: HeadSpec):
        super().__init__()
        self.spec = spec
        self.fc = nn.Linear(2 * spec.hidden, spec.hidden, bias=False)
        self.layer = DecoderLayer(spec)
        # the prediction stands in for a post-norm target state: its own norm, initialised by the
        # trainer from the target's final norm, gives it the same form
        self.norm = nn.RMSNorm(spec.hidden, eps=spec.eps)

    def forward(self, features: Tensor, embeds: Tensor, positions: Tensor, past: KV | None = None) -> tuple[Tensor, KV]:
        """features, embeds [B, T, H] -> predicted next-position features [B, T, H] and the new cache."""
        x, cache = self.layer(self.fc(torch.cat([features, embeds], -1)), positions, past)
        return self.norm(x), cache


def save_head(path: Path, head: FeatureHead, vocab: Tensor, int8: bool = False) -> None:
    """fp16 weights (or, with `int8`, matrices as int8 with one fp16 scale per output row: half the
    size, for the heads committed to the repository) plus the draft vocabulary and the shape;
    written whole (temp file, then rename)."""
    tensors = {}
    for name, t in head.state_dict().items():
        t = t.detach().float()
        if int8 and t.dim() == 2:
            scale = t.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
            tensors[name] = (t / scale).round().to(torch.int8).contiguous()
            tensors[name + SCALE] = scale.to(torch.float16).contiguous()
        else:
            tensors[name] = t.to(torch.float16).contiguous()
    tensors["vocab"] = vocab.to(torch.int32).contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file(tensors, partial, metadata={"spec": json.dumps(asdict(head.spec))})
    partial.rename(path)


def load_head(path: Path) -> tuple[FeatureHead, Tensor]:
    """(the head in float32, eval mode; its draft vocabulary as token ids), from either format."""
    with safe_open(path, "pt") as f:
        spec = HeadSpec(**json.loads(f.metadata()["spec"]))
    tensors = load_file(path)
    vocab = tensors.pop("vocab").long()
    scales = {name[:-len(SCALE)]: tensors.pop(name) for name in list(tensors) if name.endswith(SCALE)}
    head = FeatureHead(spec)
    head.load_state_dict({name: t.float() * scales[name].float() if name in scales else t.float()
                          for name, t in tensors.items()})
    return head.eval(), vocab


@dataclass(frozen=True)
class Frozen:
    """The target's pieces a head uses unchanged: its input embedding (all V rows) and the rows of
    its output head for the draft vocabulary (R of them, so a draft step costs R, not V, dot products)."""
    embed: Tensor  # [V, H], in the target's dtype
    rows: Tensor  # [R, H] float32
    vocab: Tensor  # [R] token ids

    @property
    def size(self) -> int:
        return self.embed.shape[0]

    def embedding(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.embed).float()


def frozen_from_model(model, vocab: Tensor) -> Frozen:
    """Shares the embedding tensor of a target loaded in this process; the restricted head rows are
    built once per (model, vocabulary), so a pool of heads holds one copy. The heads run on the CPU
    (the target hands them its hidden states there, models/runner.py), so a GPU target's tensors are
    copied to it once; a CPU target's are shared as they are."""
    return _shared(model, tuple(vocab.tolist()))


@functools.lru_cache(maxsize=4)
def _shared(model, vocab: tuple[int, ...]) -> Frozen:
    ids = torch.tensor(vocab, dtype=torch.long)
    rows = model.get_output_embeddings().weight.detach().cpu()[ids].float()
    return Frozen(model.get_input_embeddings().weight.detach().cpu(), rows, ids)


def frozen_from_folder(folder: Path, vocab: Tensor) -> Frozen:
    """The same pieces read from the target's safetensors folder, for a drafter in another process."""
    embed = _read(folder, "model.embed_tokens.weight")
    config = json.loads((folder / "config.json").read_text())
    head = embed if config.get("tie_word_embeddings") else _read(folder, "lm_head.weight")
    return Frozen(embed, head[vocab].float(), vocab)


def _read(folder: Path, name: str) -> Tensor:
    index = folder / "model.safetensors.index.json"
    file = json.loads(index.read_text())["weight_map"][name] if index.exists() else "model.safetensors"
    with safe_open(folder / file, "pt") as f:
        return f.get_tensor(name)

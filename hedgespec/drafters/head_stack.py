"""N feature heads of one shape run as one: their weights stacked along a leading axis.

The evaluation phase feeds the same committed tokens and target states to every head of the pool,
so their forwards differ only in weights. Stacked, they become batched matrix products (torch.bmm)
over [N, T, H] activations with [N, kv_heads, L, head_dim] caches: one call of a few ms for all N
heads instead of N calls, which on a CPU are mostly per-call overhead. It computes exactly what
`FeatureHead.forward` computes for each head (same layer, written batched), up to float rounding.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from hedgespec.drafters.feature_head import KV, FeatureHead, rope

LINEARS = ("q", "k", "v", "o", "gate", "up", "down")
NORMS = ("attn_norm", "mlp_norm")


class StackedHeads:
    def __init__(self, heads: list[FeatureHead]):
        if not heads or any(h.spec != heads[0].spec for h in heads):
            raise ValueError("stacked heads need at least one head, all of one shape")
        self.spec = heads[0].spec
        self.size = len(heads)

        def stacked(get, transpose: bool) -> Tensor:
            weights = torch.stack([get(h).detach().float() for h in heads])
            return weights.transpose(1, 2).contiguous() if transpose else weights

        # linear weights as [N, in, out], so that x [N, T, in] @ w is the layer; norms as [N, H]
        self.weights = {"fc": stacked(lambda h: h.fc.weight, True), "norm": stacked(lambda h: h.norm.weight, False)}
        for name in LINEARS:
            self.weights[name] = stacked(lambda h, n=name: getattr(h.layer, n).weight, True)
        for name in NORMS:
            self.weights[name] = stacked(lambda h, n=name: getattr(h.layer, n).weight, False)

    def members(self, index: slice) -> dict[str, Tensor]:
        """The weights of a run of heads (views, no copy)."""
        return {name: w[index] for name, w in self.weights.items()}

    def _norm(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), eps=self.spec.eps) * weight[:, None, :]

    @torch.inference_mode()
    def forward(self, weights: dict[str, Tensor], features: Tensor, embeds: Tensor, positions: Tensor,
                past: KV | None) -> tuple[Tensor, KV]:
        """features, embeds [n, T, H] for the n heads of `weights` -> predicted features [n, T, H] and
        the new caches [n, kv_heads, L + T, head_dim]."""
        spec, w = self.spec, weights
        n, length, _ = features.shape
        x = torch.bmm(torch.cat([features, embeds], -1), w["fc"])
        h = self._norm(x, w["attn_norm"])
        q = torch.bmm(h, w["q"]).view(n, length, spec.heads, spec.head_dim).transpose(1, 2)
        k = torch.bmm(h, w["k"]).view(n, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        v = torch.bmm(h, w["v"]).view(n, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        q, k = rope(q, positions, spec.rope_theta), rope(k, positions, spec.rope_theta)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        total = k.shape[2]
        mask = None if length == 1 else torch.arange(total) <= torch.arange(total - length, total)[:, None]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + torch.bmm(attended.transpose(1, 2).reshape(n, length, -1), w["o"])
        h = self._norm(x, w["mlp_norm"])
        x = x + torch.bmm(F.silu(torch.bmm(h, w["gate"])) * torch.bmm(h, w["up"]), w["down"])
        return self._norm(x, w["norm"]), (k, v)

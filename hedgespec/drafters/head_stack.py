"""N feature heads of one shape run as one call, for drafting and for the evaluation phase.

The evaluation phase feeds the same committed tokens and target states to every head of the pool,
so one call runs any run of the heads over [n, T, H] activations with [n, kv_heads, L, head_dim]
caches (attention batched across heads). It computes what `FeatureHead.forward` computes for each
head, except that the matrix products run in int8 where PyTorch has FBGEMM (x86): weights int8
with one scale per output row (the form the committed heads are stored in), activations quantized
per call. On a CPU a head's forward over a few tokens is bound by reading its weights, not by
arithmetic: measured on the 2-core AVX2 machine, the eight heads' fp32 weights (134 MB) took
39 ms per scored round as batched fp32 products and about a quarter of that in int8, and an int8
product with the 16k-row output head took 0.6 ms against 3.9 ms for one token (`hedgespec bench
overhead`). Elsewhere the products run in float32.
"""
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from hedgespec.drafters.feature_head import KV, FeatureHead, attend

LINEARS = ("fc", "q", "k", "v", "o", "gate", "up", "down")


def int8_available() -> bool:
    return bool({"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines)) and hasattr(torch.ops.quantized, "linear_dynamic")


class Linear:
    """y = x W^T for a fixed W [out, in]: FBGEMM's dynamic int8 product where it runs, else float32."""

    def __init__(self, weight: Tensor, int8: bool):
        weight = weight.detach().float()
        self.out = weight.shape[0]
        if int8:
            scale = (weight.abs().amax(1).clamp_min(1e-12) / 127).double()
            with warnings.catch_warnings():  # PyTorch marks its eager quantized tensors as deprecated; they run
                warnings.simplefilter("ignore")
                quantized = torch.quantize_per_channel(weight, scale, torch.zeros(self.out, dtype=torch.long), 0, torch.qint8)
                self.packed = torch.ops.quantized.linear_prepack(quantized, None)
            self.weight_t = None
        else:
            self.packed, self.weight_t = None, weight.T.contiguous()

    def __call__(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.ops.quantized.linear_dynamic(flat, self.packed, True) if self.packed is not None else flat @ self.weight_t
        return y.view(*x.shape[:-1], self.out)


class StackedHeads:
    def __init__(self, heads: list[FeatureHead], int8: bool | None = None):
        if not heads or any(h.spec != heads[0].spec for h in heads):
            raise ValueError("stacked heads need at least one head, all of one shape")
        self.spec = heads[0].spec
        self.size = len(heads)
        self.int8 = int8_available() if int8 is None else int8
        self.linears = [{name: Linear((h.fc if name == "fc" else getattr(h.layer, name)).weight, self.int8)
                         for name in LINEARS} for h in heads]
        self.norms = {name: torch.stack([w(h).detach().float() for h in heads])
                      for name, w in (("attn_norm", lambda h: h.layer.attn_norm.weight),
                                      ("mlp_norm", lambda h: h.layer.mlp_norm.weight), ("norm", lambda h: h.norm.weight))}

    def _norm(self, x: Tensor, name: str, members: slice) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), eps=self.spec.eps) * self.norms[name][members, None, :]

    def _each(self, name: str, x: Tensor, members: slice) -> Tensor:
        """Head i of the run applies its own `name` weights to x[i]."""
        return torch.stack([self.linears[j][name](x[i]) for i, j in enumerate(range(members.start, members.stop))])

    @torch.inference_mode()
    def forward(self, members: slice, features: Tensor, embeds: Tensor, positions: Tensor,
                past: KV | None) -> tuple[Tensor, KV]:
        """features, embeds [n, T, H] for the run of heads `members` -> predicted features [n, T, H]
        and their new caches [n, kv_heads, L + T, head_dim]."""
        spec = self.spec
        n, length, _ = features.shape
        x = self._each("fc", torch.cat([features, embeds], -1), members)
        h = self._norm(x, "attn_norm", members)
        q = self._each("q", h, members).view(n, length, spec.heads, spec.head_dim).transpose(1, 2)
        k = self._each("k", h, members).view(n, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        v = self._each("v", h, members).view(n, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
        attended, cache = attend(q, k, v, positions, past, spec.rope_theta)
        x = x + self._each("o", attended.transpose(1, 2).reshape(n, length, -1), members)
        h = self._norm(x, "mlp_norm", members)
        x = x + self._each("down", F.silu(self._each("gate", h, members)) * self._each("up", h, members), members)
        return self._norm(x, "norm", members), cache

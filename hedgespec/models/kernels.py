"""Matrix products for the target's forward on CPU: weights prepacked once for oneDNN.

Verification feeds a few tokens per forward, so the target's linear layers multiply a [1..K+1, H]
activation by each weight matrix. PyTorch's default CPU path (MKL sgemm) is slow at those shapes:
measured on the 2-core AMD EPYC (AVX2) of this project's machines, one SmolLM2 forward after a
300-token context took 64.6 ms for 1 new token and 123 ms for 6 with MKL, against 63.2 and 104 ms
with the weights prepacked for oneDNN (`/tmp`-free reproduction: `hedgespec bench kernels`). The
gap is the whole cost of verifying a longer draft, so the target's linears are swapped for
`PackedLinear` where oneDNN runs (CPU, float32, PyTorch built with mkldnn); elsewhere nothing
changes. The logits differ from MKL's by float32 rounding only.
"""
import torch
from torch import nn


def packing_available(device: torch.device, dtype: torch.dtype) -> bool:
    return (device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


class PackedLinear(nn.Module):
    """A Linear whose weight is also held in oneDNN's blocked layout (the original stays, shared with
    any tied module such as the input embedding)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == x.shape[-1]:  # one token: MKL's matrix-vector product was the faster one here
            return nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(model: nn.Module) -> int:
    """Swaps every nn.Linear of `model` for a PackedLinear where oneDNN runs; returns how many."""
    parameter = next(model.parameters())
    if not packing_available(parameter.device, parameter.dtype):
        return 0
    swapped = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child))
                swapped += 1
    return swapped

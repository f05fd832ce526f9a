"""`hedgespec bench forward`: the target's forward cost against the number of new tokens after a
cached context, with the default CPU kernels and with the weights prepacked for oneDNN, one
process (what a round's verify costs at each draft length, models/kernels.py)."""
import statistics

import torch

from hedgespec.models import loading
from hedgespec.models.runner import CachedLM

SIZES = (1, 2, 3, 4, 6, 8)


def forward_ms(lm: CachedLM, context: int, sizes=SIZES, repeats: int = 15, seed: int = 0) -> dict[int, float]:
    """Median ms of a forward over n new tokens after `context` cached tokens, per n."""
    return {n: 1e3 * statistics.median(seconds) for n, seconds in lm.forward_seconds(sizes, context, repeats, seed).items()}


def main(model: str, dtype: str, context: int) -> int:
    results = {}
    for pack in (False, True):
        lm = CachedLM(loading.load(model, dtype)[0], pack=pack)
        if pack and not lm.packed:
            print("oneDNN prepacking is not available here (needs CPU, float32, PyTorch with mkldnn)")
            break
        results["oneDNN prepacked" if pack else "default"] = forward_ms(lm, context)
    print(f"target {model}, {loading.resolve_dtype(dtype)}, {torch.get_num_threads()} thread(s), context {context}: "
          f"median ms per forward (ratio to 1 new token)")
    for name, ms in results.items():
        print(f"{name:17s} " + "  ".join(f"{n}: {v:6.1f} ({v / ms[1]:.2f}x)" for n, v in ms.items()))
    return 0

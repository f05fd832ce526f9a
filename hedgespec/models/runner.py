"""A Hugging Face causal LM with one KV cache per request that can be rolled back.

Speculative decoding feeds drafts that may be rejected, so both the target and LM drafters need
to append a block of tokens in one forward and later cut the cache back to the committed length.
"""
import time

import torch
from transformers import DynamicCache, PreTrainedModel

from hedgespec.models.kernels import pack_linears


class CachedLM:
    def __init__(self, model: PreTrainedModel, pack: bool = True):
        """`pack`: prepack the linear layers for oneDNN where it runs (models/kernels.py)."""
        self.model = model.eval()
        self.packed = pack_linears(model) if pack else 0
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.vocab = self.head.weight.shape[0]
        self.max_length = getattr(model.config, "max_position_embeddings", None)
        self.device = next(model.parameters()).device
        self.caches: dict[str, DynamicCache] = {}

    def start(self, request_id: str) -> None:
        self.caches[request_id] = DynamicCache(config=self.model.config)

    def length(self, request_id: str) -> int:
        return self.caches[request_id].get_seq_length()

    @torch.inference_mode()
    def forward(self, request_id: str, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `tokens` to the request's cache; returns float32 logits [n, V] and the last
        hidden states [n, H] (after the final norm, i.e. what the output head reads)."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        out = self.decoder(input_ids=ids, past_key_values=self.caches[request_id], use_cache=True)
        hidden = out.last_hidden_state[0]
        # verification and evaluation are small CPU-side work; on a GPU this is one copy per round
        return self.head(hidden).float().cpu(), hidden.cpu()

    def warm_up(self, sizes: range, context: int = 8) -> None:
        """One forward of every number of tokens in `sizes`, on a scratch request, before requests
        are served. On a GPU the first forward of each new size does one-off work (kernel
        selection): on an H200 in bfloat16, SmolLM2's first 1-6-token forwards took 71-113 ms, warm
        ones 17-28 ms (benchmarks/gpu/README.md). The time objective prices a round by the verify
        and draft times it measured (arms.py): such first forwards would be among its first samples.
        (The H200's stalled first drafting rounds came back with the warm-up in place, for another
        cause; arms.py's medians are what keep one slow round from pricing an arm out.)"""
        self.forward_seconds(sizes, context)

    def forward_seconds(self, sizes, context: int, repeats: int = 1, seed: int = 0) -> dict[int, list[float]]:
        """The seconds of `repeats` forwards over n new tokens after `context` cached ones, per n in
        `sizes`: random tokens on a scratch request, cropped back to the context after each."""
        generator = torch.Generator().manual_seed(seed)
        tokens = lambda n: torch.randint(0, self.vocab, (n,), generator=generator).tolist()  # noqa: E731
        scratch = "forward-seconds"
        self.start(scratch)
        try:
            self.forward(scratch, tokens(context))
            seconds = {}
            for n in sizes:
                seconds[n] = []
                for _ in range(repeats):
                    drafted = tokens(n)
                    start = time.perf_counter()
                    self.forward(scratch, drafted)
                    seconds[n].append(time.perf_counter() - start)
                    self.crop(scratch, context)
            return seconds
        finally:
            self.release(scratch)

    def crop(self, request_id: str, length: int) -> None:
        """Forget every cached position at or after `length`."""
        extra = self.length(request_id) - length
        assert extra >= 0, f"cannot grow a cache by cropping ({length} > {self.length(request_id)})"
        if extra:
            self.caches[request_id].crop(-extra)

    def release(self, request_id: str) -> None:
        self.caches.pop(request_id, None)

    @property
    def active(self) -> int:
        return len(self.caches)

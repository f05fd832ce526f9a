"""The worker methods through which the Target deployment reaches the HedgeSpec proposer inside
vLLM's worker process: mixed into vLLM's worker (engine argument worker_extension_cls) and called
with AsyncLLM.collective_rpc (vllm_engine.py)."""
from hedgespec.learners.priors import Learned
from hedgespec.vllm_proposer import HedgeSpecProposer


class ProposerControl:
    def _hedgespec(self) -> HedgeSpecProposer | None:
        drafter = getattr(getattr(self, "model_runner", None), "drafter", None)
        return drafter if isinstance(drafter, HedgeSpecProposer) else None

    def hedgespec_active(self) -> int:
        proposer = self._hedgespec()
        return proposer.active if proposer else 0

    def hedgespec_costs(self) -> dict:
        proposer = self._hedgespec()
        return proposer.costs_snapshot() if proposer else {}

    def hedgespec_release(self, request_ids: list[str]) -> dict[str, list[tuple]]:
        proposer = self._hedgespec()
        return proposer.release(request_ids) if proposer else {}

    def hedgespec_learned(self) -> Learned:
        """What the learners of the requests that ended here taught (their warm-start prior's share)."""
        proposer = self._hedgespec()
        return proposer.warm.learned() if proposer else {}

    def hedgespec_adopt(self, merged: Learned) -> None:
        """New requests' learners start from `merged`: what every engine's requests taught."""
        proposer = self._hedgespec()
        if proposer:
            proposer.warm.adopt(merged)

"""Request affinity for drafter groups with several replicas.

A drafter keeps per-request state (its KV cache, its n-gram index), so every call of a request must
reach the replica that ran its `begin`. The ingress tags each call with the request id as the
multiplexed model id; this router sends a request's first call to the replica holding the fewest
requests, pins the request there when it chooses it, and sends every later call there until
`release`. A replica that dies takes its pins with it: the ingress rebuilds such a request under a
new id (adapters.py), and a late call under the old id goes wherever the router would send a new
one, to fail there visibly.
"""
from ray.serve.request_router import MultiplexMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica


class RequestAffinityRouter(MultiplexMixin, RequestRouter):
    def initialize_state(self, **kwargs):
        self.owner: dict[str, ReplicaID] = {}
        self.load: dict[ReplicaID, int] = {}  # live requests pinned to each replica

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        request_id = pending_request.metadata.multiplexed_model_id if pending_request else ""
        owner = self.owner.get(request_id)
        if owner is not None:
            pinned = [r for r in candidate_replicas if r.replica_id == owner]
            if pinned:
                return [pinned]
            self._unpin(request_id)
        chosen = min(candidate_replicas, key=lambda r: self.load.get(r.replica_id, 0))
        if request_id:
            # pinned when chosen, not once routed: requests that begin together are chosen before
            # any of them is routed, and would all see the same replica as the least loaded
            self.owner[request_id] = chosen.replica_id
            self.load[chosen.replica_id] = self.load.get(chosen.replica_id, 0) + 1
        return [[chosen]]

    def _unpin(self, request_id: str) -> None:
        replica_id = self.owner.pop(request_id, None)
        if replica_id is not None:
            self.load[replica_id] = self.load.get(replica_id, 1) - 1

    def on_replica_actor_died(self, replica_id: ReplicaID):
        super().on_replica_actor_died(replica_id)
        for request_id in [r for r, owner in self.owner.items() if owner == replica_id]:
            self._unpin(request_id)
        self.load.pop(replica_id, None)

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        if pending_request.metadata.call_method == "release":
            self._unpin(pending_request.metadata.multiplexed_model_id)

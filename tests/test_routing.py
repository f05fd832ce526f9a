"""The drafter groups' affinity router (deployments/routing.py), driven as Ray Serve's router drives
it: choose_replicas per call, on_request_routed once a call is sent, on_replica_actor_died."""
import asyncio
from types import SimpleNamespace

from deployments.routing import RequestAffinityRouter


def replica(name: str):
    return SimpleNamespace(replica_id=name)


def call(key: str, method: str):
    return SimpleNamespace(metadata=SimpleNamespace(multiplexed_model_id=key, call_method=method))


def router() -> RequestAffinityRouter:
    affinity = RequestAffinityRouter.__new__(RequestAffinityRouter)  # Serve's constructor needs a running deployment
    affinity.initialize_state()
    return affinity


def choose(affinity, replicas, pending) -> str:
    [[chosen]] = asyncio.run(affinity.choose_replicas(replicas, pending))
    return chosen.replica_id


def test_requests_that_begin_together_spread_over_the_replicas():
    """Four requests chosen before any of them is routed (as when clients arrive together): two per
    replica, not all four on the one that looked least loaded to each."""
    affinity, replicas = router(), [replica("a"), replica("b")]
    begins = [call(f"request-{i}", "begin") for i in range(4)]
    chosen = [choose(affinity, replicas, pending) for pending in begins]
    assert sorted(chosen) == ["a", "a", "b", "b"]
    for pending, name in zip(begins, chosen):
        affinity.on_request_routed(pending, name, None)
    # every later call of a request reaches its replica, whatever the load is by then
    for i, name in enumerate(chosen):
        assert choose(affinity, replicas, call(f"request-{i}", "propose")) == name


def test_a_released_request_frees_its_place():
    affinity, replicas = router(), [replica("a"), replica("b")]
    first, second = call("first", "begin"), call("second", "begin")
    assert (choose(affinity, replicas, first), choose(affinity, replicas, second)) == ("a", "b")
    release = call("first", "release")
    assert choose(affinity, replicas, release) == "a"
    affinity.on_request_routed(release, "a", None)
    assert choose(affinity, replicas, call("third", "begin")) == "a"  # a holds none now, b one

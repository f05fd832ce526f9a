"""The Serve path of a learner: RemoteSelector (the ingress's adapter) against the Selector
deployment's own class, called through a handle stand-in that runs the deployment's coroutines on
an event loop of their own, as a replica does. Its answers are played a round late, so a bandit's
importance weights must use the probability of the draw that was played, not the latest one."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from deployments.adapters import RemoteSelector
from deployments.selector import SelectorDeployment
from hedgespec.config import SelectorConfig
from hedgespec.feedback import RoundFeedback


class Replica:
    """Handle stand-in: `.method.remote(*args)` runs the deployment's coroutine on the replica's
    loop and returns a response with `.result(timeout_s=...)`; every answer of `step` is noted."""

    def __init__(self, instance):
        self.instance, self.answers = instance, []
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def options(self, **_):
        return self

    def __getattr__(self, method):
        replica = self

        class Method:
            @staticmethod
            def remote(*args):
                future = asyncio.run_coroutine_threadsafe(getattr(replica.instance, method)(*args), replica.loop)
                if method == "step":
                    future.add_done_callback(lambda f: replica.answers.append(f.result()))

                class Response:
                    @staticmethod
                    def result(timeout_s=None):
                        return future.result(timeout_s)
                return Response()
        return Method()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exp3spec_on_the_serve_path_weights_each_round_by_the_draw_it_played(seed):
    k, n, rounds = 4, 3, 30
    replica = Replica(SelectorDeployment.func_or_class({"name": "exp3spec"}, ["a", "b", "c"], k))
    remote = RemoteSelector(replica, "r1", ThreadPoolExecutor(2), seed, SelectorConfig(name="exp3spec"), k)
    rng = np.random.default_rng(seed)
    remote.begin("")
    played, committed = [], []
    for r in range(rounds):
        awake = rng.random(n) < 0.6
        awake[rng.integers(n)] = True
        arm = remote.choose(awake)
        y = int(rng.integers(1, k + 2))
        remote.observe(RoundFeedback(arm, y, k))
        remote.next_choice.result()  # the answer for the next round has arrived: the lag is one round, exactly
        played.append(arm)
        committed.append(y)
    # round r plays the answer of the step in round r - 1 (round 0: its own, waited for) where that
    # arm is awake; the feedback of rounds 0..rounds-2 has reached the learner (the last rides on end)
    expected = np.zeros(n)
    for r in range(rounds - 1):
        answer, probability = replica.answers[max(0, r - 1)]
        if played[r] == answer:
            expected[answer] += (k + 1 - committed[r]) / (k * probability)
    learner = replica.instance.selectors["r1"][0]
    assert np.isfinite(learner.estimated).all()
    np.testing.assert_allclose(learner.estimated, expected, rtol=1e-12)
    assert sum(played[r] != replica.answers[max(0, r - 1)][0] for r in range(rounds)) > 0  # fallbacks occurred
    remote.end()
    assert replica.instance.selectors == {}

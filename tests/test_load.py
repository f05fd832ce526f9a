"""`hedgespec bench soak` on the tiny app: sustained concurrent streams lose nothing, greedy texts
under load equal the same requests alone, and every replica's memory is reported. Behind the
`faults` marker with the other sustained-load and fault tests (.ci/run runs them)."""
import pytest

from deployments import load

pytestmark = pytest.mark.faults


def test_sustained_load_loses_nothing_and_changes_no_greedy_text():
    prompts = ["abc abc abc abc", "The quick brown fox", "SELECT name FROM users WHERE", "Write a poem."]
    result = load.run("configs/serve-tiny.yaml", prompts, clients=6, duration_s=20, max_tokens=24, seed=0,
                      warmup_s=5)
    assert result["requests"] >= 12 and result["lost"] == 0
    assert result["complete"] == result["requests"], result["outcomes"]
    done, greedy = map(int, result["greedy_identical_to_alone"].split("/"))
    assert greedy > 0 and done == greedy
    assert result["ttft_s"]["p50"] is not None and result["tpot_s"]["p99"] >= result["tpot_s"]["p50"]
    titles = " ".join(result["memory_after_warmup"])
    for deployment in ("Ingress", "Target", "Selector", "DrafterGroup-lm", "DrafterGroup-lookup"):
        assert f"ServeReplica:hedgespec:{deployment}" in titles
    stats = result["stats_after"]
    assert stats["in_flight"] == 0 and stats["target"] == 0

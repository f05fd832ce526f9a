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


def test_bench_load_sweeps_clients_per_kind_and_speculation_changes_no_greedy_text():
    from deployments import sweep
    prompts = ["abc abc abc abc", "The quick brown fox", "SELECT name FROM users WHERE"]
    result = sweep.run("configs/serve-tiny.yaml", prompts, ["none", "hedgespec"], [1, 3], 1, 16,
                       single=["one two one two one two"], pinned=["prompt-lookup"], repeats=2)
    assert result["kinds"] == ["none", "hedgespec", "prompt-lookup alone"]
    assert result["dtype"] == "float32"  # the config's, stated with the figures
    for kind in result["kinds"]:
        run = result["runs"][kind]
        assert [level["clients"] for level in run["levels"]] == [1, 3]
        # every prompt at least once at every level and repeat: one client sends all three, twice
        assert [level["requests"] for level in run["levels"]] == [6, 6]
        for level in run["levels"] + [run["single"]]:
            assert level["complete"] == level["requests"] and not level["errors"]
            rates = level["tokens_per_s_repeats"]
            assert len(rates) == 2 and min(rates) > 0 and level["tokens_per_s"] == (rates[0] + rates[1]) / 2
            assert level["itl_s"]["p99"] >= level["itl_s"]["p50"]
            same, total = map(int, level["greedy_equal_to_baseline"].split("/"))
            assert total > 0 and same == total  # HedgeSpec's greedy text is the target's own
    assert all(level["vs_baseline"] == 1.0 for level in result["runs"]["none"]["levels"])
    # the ratio pairs each repeat with the baseline's run of the same repeat: the median (here the mean) of those
    speculated, plain = (result["runs"][kind]["levels"][1]["tokens_per_s_repeats"] for kind in ("hedgespec", "none"))
    assert result["runs"]["hedgespec"]["levels"][1]["vs_baseline"] == pytest.approx(
        (speculated[0] / plain[0] + speculated[1] / plain[1]) / 2)
    alone = result["runs"]["none"]["levels"][1]
    assert alone["mat"] == 1.0 and alone["drafted_per_step"] == 0  # the target alone: a token per forward
    assert result["runs"]["hedgespec"]["levels"][1]["mat"] >= 1.0
    # the pinned run drafted with prompt lookup alone (or not at all, where it had nothing to copy)
    assert set(result["runs"]["prompt-lookup alone"]["levels"][1]["rounds_by_drafter"]) <= {"prompt-lookup", "none"}

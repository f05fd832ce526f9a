"""Benchmark machinery on tiny models: the selector benchmark, regret accounting, the router."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hedgespec.bench import overhead, selectors, speed
from hedgespec.config import SelectorConfig, load_config
from hedgespec.decode import Generation, Round
from hedgespec.engine import Engine
from hedgespec.feedback import MaturedLoss
from hedgespec.learners.router import DomainClassifier, RouterSelector
from hedgespec.sampling import Sampling

FIXTURE = Path(__file__).parent / "fixtures" / "data"


def test_regret_curve_counts_against_the_best_drafter_in_hindsight():
    names = ["a", "b"]
    losses = {0: [0.2, 0.6], 3: [0.5, 0.1], 5: [0.4, 0.3]}
    rounds = [Round("b", 4, 2, 3), Round("a", 4, 1, 2), Round(None, 0, 0, 1), Round("a", 4, 0, 1)]
    gen = Generation([0] * 7, "", "length", rounds, 1.0,
                     losses=[MaturedLoss(p, np.array(v), np.ones(2, bool), 0) for p, v in losses.items()])
    tokens, curve, per_token = selectors.regret_curve(gen, names)
    # chosen: b at 0 (0.6), a at 3 (0.5); no draft at 5; a at 6 has no loss row -> skipped
    # best in hindsight over the scored rounds: a (0.7) vs b (0.7): argmin picks a
    assert tokens == [3, 5]
    assert curve == pytest.approx([0.6 - 0.2, 1.1 - 0.7])
    assert per_token == pytest.approx(0.4 / 7)


def test_selector_benchmark_on_tiny_models():
    """Live and replayed, every MAT-objective selector gets the same MAT per query; the ceiling, with
    the target's own weights in the pool, commits K+1 tokens a round; learners beat a bad drafter."""
    engine = Engine(load_config("configs/tiny.yaml"))
    queries = [{"prompt": "abc abc abc abc", "domain": "x"}, {"prompt": "hello there friend", "domain": "y"}]
    chosen = selectors.default_selectors([d.name for d in engine.drafters], ("prompt-lookup", "other-model"), None)
    chosen = {label: c for label, c in chosen.items() if c.objective != "time"}
    live = selectors.run(engine, queries, chosen, 24, Sampling(), 0, progress=False)["selectors"]
    replayed = selectors.run(engine.with_drafters(engine.drafters), queries, chosen, 24, Sampling(), 0, progress=False,
                             replay=True)
    summary = replayed["selectors"]
    for label in chosen:
        assert summary[label]["per_query_mat"] == pytest.approx(live[label]["per_query_mat"]), label
        assert "tokens_per_s" in live[label] and "tokens_per_s" not in summary[label]  # a replay times nothing
    k = engine.config.k
    lengths = [engine.generate(q["prompt"], 24, speculate=False) for q in queries]
    lengths = [len(g.tokens) + (g.finish_reason == "stop") for g in lengths]
    assert summary[selectors.CEILING]["per_query_rounds"] == [-(-n // (k + 1)) for n in lengths]
    assert replayed["best_fixed"] == "fixed:same-model"  # the target's own weights accept everything
    assert summary["hedgespec"]["mat"] > summary["fixed:other-model"]["mat"]
    assert 0 < summary["ucbspec"]["explored_share"] <= 1
    # fixed drafters run alone: no loss vectors of the others, so no regret row; learners have one
    assert "regret_per_token" not in summary["fixed:same-model"] and "regret_per_token" in summary["hedgespec"]
    with pytest.raises(ValueError, match="time objective"):
        selectors.run(engine, queries, {"t": SelectorConfig(name="hedgespec", loss="time")}, 24, Sampling(), 0, replay=True)
    json.dumps(replayed)  # the --json output is plain JSON
    assert "| hedgespec |" in selectors.table(replayed)


def test_speed_benchmark_runs_every_side_on_tiny_models():
    """Target-only, HedgeSpec on both objectives and the singles at their calibrated best K, in one
    run; greedy text identical on every side in float32; the best K is the replay's prediction."""
    engine = Engine(load_config("configs/tiny.yaml"))
    result = speed.run(engine, ["abc abc abc abc abc abc", "hello there friend, hello there"], Sampling(), 24, 0,
                       singles=2, calibration=1)
    sides = result["sides"]
    assert {"target-only", "hedgespec (time)", "hedgespec (MAT)"} <= set(sides) and len(sides) == 5
    assert all(s["identical"] == 2 for s in sides.values())
    calibration = result["calibration"]["same-model"]
    assert calibration["best_k"] == max(calibration["per_k"], key=lambda k: calibration["per_k"][k]["predicted_tokens_per_s"])
    # the hindsight per-round plan over time can always play any single drafter at any K: never slower
    singles = [c["per_k"][k]["predicted_tokens_per_s"] for c in result["calibration"].values() for k in c["per_k"]]
    assert result["time_ceiling"]["predicted_tokens_per_s"] >= 0.99 * max(singles)  # 1%: the last rounds draft fewer, timed apart
    assert calibration["per_k"][4]["mat"] > calibration["per_k"][1]["mat"]  # the target's own weights accept all K
    assert "same-model@" in " ".join(sides)  # the drafter that accepts everything is among the fastest singles
    json.dumps(result)
    assert "| target-only |" in speed.table(result)


def test_overhead_breakdown_accounts_for_the_round():
    engine = Engine(load_config("configs/tiny.yaml"))
    result = overhead.round_breakdown(engine, ["abc abc abc"], 16, Sampling(), 0)
    assert result["rounds"] > 0 and result["ms_per_round"]["target_forward"] > 0
    assert sum(result["share"].values()) == pytest.approx(1.0)
    assert set(overhead.learner_update_us(8, updates=50)) == {"normalhedge", "adanormalhedge", "hedge"}


def test_router_classifies_domain_text_and_routes():
    texts = {d.name: [json.loads(line)["text"] for line in (d / "train.jsonl").read_text().splitlines()]
             for d in FIXTURE.iterdir() if (d / "train.jsonl").exists() and d.name != "general"}
    classifier = DomainClassifier.fit(texts)
    correct = sum(classifier.predict(doc) == domain for domain, docs in texts.items() for doc in docs)
    assert correct / sum(map(len, texts.values())) > 0.9  # it fits its own training text
    router = RouterSelector(3, classifier, {"sql": 2}, fallback=0)
    router.begin(texts["sql"][0])
    assert router.domain == "sql" and router.choose(None) == 2
    router.begin(texts["python"][0])
    assert router.choose(None) == 0


def test_router_survives_a_save_and_load(tmp_path):
    classifier = DomainClassifier.fit({"a": ["select from where join"], "b": ["def return import class"]})
    classifier.save(tmp_path / "c.npz")
    again = DomainClassifier.load(tmp_path / "c.npz")
    assert again.predict("select x from t where y") == "a" and again.predict("def f(): return 1") == "b"


def test_matrix_on_tiny_models(tmp_path):
    from hedgespec.bench import matrix
    engine = Engine(load_config("configs/tiny.yaml"))
    result = matrix.run(engine, {"a": ["abc abc abc", "hello there"], "b": ["one two one two"]}, 16, progress=False)
    assert result["best_per_domain"] == {"a": "same-model", "b": "same-model"}
    assert result["mixed"]["oracle_mat"] >= result["mixed"]["best_fixed_mat"]
    assert set(result["tokens_per_s"]["other-model"]) == {"a", "b"} and result["target_only_tokens_per_s"]["a"] > 0
    assert "| same-model | " in matrix.markdown(result)
    matrix.heatmap(result, str(tmp_path / "m.png"))
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    # a baseline is measured but is not part of the pool's oracle
    without = matrix.run(engine, {"a": ["abc abc abc"]}, 16, baselines=["same-model"], progress=False)
    assert without["mixed"]["best_fixed"] != "same-model" and without["mat"]["same-model"]["a"] > without["mixed"]["oracle_mat"]
    with pytest.raises(ValueError, match="not in the config"):
        matrix.run(engine, {"a": ["abc"]}, 8, baselines=["nobody"], progress=False)


def test_matrix_compares_each_specialist_with_the_generalist_and_the_all_domains_head():
    from hedgespec.bench import matrix
    per_query = {"sql": {"eagle-sql": [2.0, 2.2, 2.1], "eagle-general": [1.5, 1.6, 2.3], "eagle-all-domains": [2.0, 2.3, 2.1]}}
    result = {"queries_per_domain": {"sql": 3}, "per_query": per_query,
              "mat": {n: {"sql": float(np.mean(v))} for n, v in per_query["sql"].items()}}
    [(domain, versus)] = matrix._specialists(result).items()
    gains = np.subtract(per_query["sql"]["eagle-sql"], per_query["sql"]["eagle-general"])
    assert versus["generalist"]["gain"] == pytest.approx(gains.mean()) and versus["generalist"]["prompts_won"] == 2
    assert versus["generalist"]["wins"] == bool(gains.mean() > gains.std())
    assert versus["all_domains"]["prompts_won"] == 0 and not versus["all_domains"]["wins"]


def test_paper_pipeline_quick_and_resumable(tmp_path, monkeypatch):
    from hedgespec.bench import paper
    partial = paper.run(tmp_path, quick=True, only=("main-greedy",))
    assert list(partial) == ["main-greedy"] and not (tmp_path / "scaling.json").exists()
    assert "Not run yet: main-sampling, scaling, shift, overhead" in (tmp_path / "BENCHMARKS.md").read_text()
    results = paper.run(tmp_path, quick=True)
    for name in ("main-greedy.json", "main-sampling.json", "scaling.json", "shift.json", "overhead.json",
                 "BENCHMARKS.md", "regret.png", "scaling.png"):
        assert (tmp_path / name).exists(), name
    greedy = results["main-greedy"]["selectors"]
    assert {"hedgespec", "ucbspec", "ucb1", "exp3spec", "router", "rule", "target-only", selectors.BEST_PER_QUERY,
            selectors.CEILING} <= greedy.keys()
    # the ceiling with the target's own weights in the pool: K+1 tokens a round, and no method does better
    k = load_config("configs/tiny.yaml").k
    lengths = greedy["target-only"]["per_query_rounds"]  # one committed token a round: the trajectory's length
    assert greedy[selectors.CEILING]["per_query_rounds"] == [-(-n // (k + 1)) for n in lengths]
    for label, row in greedy.items():
        assert all(r >= c for r, c in zip(row["per_query_rounds"], greedy[selectors.CEILING]["per_query_rounds"])), label
    assert set(results["scaling"]) == {"2", "4"}
    report = (tmp_path / "BENCHMARKS.md").read_text()
    assert "Conditions:" in report and "--quick" in report and "Not run yet" not in report
    assert "per-round ceiling" in report and "oracle" not in report
    assert "## Pool size" in report and "## Overheads" in report and "Rewording:" in report

    def no_rerun(*args, **kwargs):
        raise AssertionError("a finished step ran again")
    monkeypatch.setattr(selectors, "run", no_rerun)
    assert paper.run(tmp_path, quick=True).keys() == results.keys()  # every step resumed from its JSON


@pytest.mark.parametrize("argv, greedy", [(["bench", "matrix", "--config", "configs/tiny.yaml"], True),
                                          (["bench", "overhead", "--config", "configs/tiny.yaml", "--temperature", "0.7"], False),
                                          (["bench", "selectors", "--config", "configs/tiny.yaml"], True)])
def test_every_bench_command_gets_its_config_and_sampling(argv, greedy, monkeypatch):
    """The CLI wiring of the engine-backed benchmarks (the command itself is stubbed)."""
    from hedgespec.bench import commands
    from hedgespec.cli import main
    seen = {}
    monkeypatch.setattr(commands, argv[1], lambda args, config, sampling: seen.update(config=config, sampling=sampling) or 0)
    assert main(argv) == 0
    assert seen["config"].target.model == "tiny:0" and seen["sampling"].greedy == greedy


def test_scaling_decoys_are_honest_datastores_even_past_small_corpora(tmp_path, monkeypatch):
    """Decoys for a 32-drafter pool: more per domain than a small corpus has 50-document slices."""
    import shutil
    from hedgespec.bench import paper
    shutil.copytree(FIXTURE, tmp_path / "data")
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path))
    engine = Engine(load_config("configs/tiny.yaml"))
    decoys = paper.decoys(engine, 15, quick=False, seed=0)
    assert len({d.name for d in decoys}) == 15 and all(len(d.store) > 0 for d in decoys)


def test_bench_engines_runs_every_kind_in_turn_and_counts_every_request(monkeypatch):
    """The in-process engine comparison's protocol, with stand-in engines (tests/test_vllm.py runs
    real ones): each kind runs every level once per repeat, in an order that rotates, every client's
    requests are counted, and every engine is shut down."""
    from hedgespec.bench import engines
    from hedgespec.models import loading
    calls, shut = [], []

    class StandIn:
        def __init__(self, config):
            self.kind = config.target.vllm.speculation

        async def generate(self, request_id, tokens, max_tokens):
            calls.append((self.kind, max_tokens))
            for _ in range(3):
                yield SimpleNamespace(tokens=[1, 2])

        async def costs(self):
            return {}

        def shutdown(self):
            shut.append(self.kind)

    tiny = loading.load_tokenizer("tiny:0")
    monkeypatch.setattr(engines, "VLLMEngine", StandIn)
    monkeypatch.setattr(engines, "sampling_params", lambda max_tokens, *rest: max_tokens)
    monkeypatch.setattr(engines.loading, "load_tokenizer", lambda model: tiny)
    config = load_config("serve_config.yaml")
    result = engines.run(config, ["a b", "c d", "e f"], ["none", "hedgespec"], [1, 2], 2, 16, repeats=2)
    assert sorted(shut) == ["hedgespec", "none"]
    warmups = [kind for kind, max_tokens in calls if max_tokens != 16]
    assert warmups == ["none"] + ["hedgespec"] + ["none"] * 2 + ["hedgespec"] * 2  # one request per client
    measured = [kind for kind, max_tokens in calls if max_tokens == 16]
    # per level and repeat, every kind sends max(3 prompts, clients x 2) requests: 3 at one client, 4 at two
    runs = [measured[i] for i in range(0, 12, 3)] + [measured[i] for i in range(12, 28, 4)]
    assert len(measured) == 28 and all(len(set(measured[i:i + 3])) == 1 for i in range(0, 12, 3))
    assert all(len(set(measured[i:i + 4])) == 1 for i in range(12, 28, 4))
    # the order rotates with the level and the repeat
    assert runs == ["none", "hedgespec", "hedgespec", "none", "hedgespec", "none", "none", "hedgespec"]
    for kind in ("none", "hedgespec"):
        assert all(len(rates) == 2 and min(rates) > 0 for rates in result["tokens_per_s_repeats"][kind].values())
    assert all(ratio == 1.0 for ratio in result["vs_baseline"]["none"].values())
    assert result["dtype"] in ("bfloat16", "float32")  # what `dtype: auto` ran as, stated with the figures


def _engines_of_stand_ins(monkeypatch):
    """bench engines with stand-in engines that record what they were built as, (speculation, K), and
    what each request asked of them, (speculation, K, whether it speculates)."""
    from hedgespec.bench import engines
    from hedgespec.models import loading
    built, asked = [], []

    class StandIn:
        def __init__(self, config):
            self.engine = (config.target.vllm.speculation, config.k)
            built.append(self.engine)

        async def generate(self, request_id, tokens, params):
            asked.append((*self.engine, params))
            yield SimpleNamespace(tokens=[1])

        async def costs(self):
            return {}

        def shutdown(self):
            pass

    tiny = loading.load_tokenizer("tiny:0")
    monkeypatch.setattr(engines, "VLLMEngine", StandIn)
    monkeypatch.setattr(engines, "sampling_params", lambda max_tokens, sampling, seed, extra: extra["hedgespec"]["speculate"])
    monkeypatch.setattr(engines.loading, "load_tokenizer", lambda model: tiny)
    return engines, built, asked


def test_bench_engines_runs_hedgespec_off_on_hedgespecs_engine_without_drafts(monkeypatch):
    """`hedgespec-off` builds no engine of its own: its requests go to HedgeSpec's engine asking for
    no speculation (speculate false in the request's extra args), HedgeSpec's own ask for it, and a
    kind that is not one is refused before any engine starts."""
    engines, built, asked = _engines_of_stand_ins(monkeypatch)
    config = load_config("serve_config.yaml")
    with pytest.raises(ValueError, match="unknown kinds"):
        engines.run(config, ["a b"], ["none", "hedgespec-of"], [1], 1, 4, repeats=1)
    assert built == []
    result = engines.run(config, ["a b"], ["none", "hedgespec", "hedgespec-off"], [1], 1, 4, repeats=1)
    assert built == [("none", config.k), ("hedgespec", config.k)]
    k = config.k
    assert sorted(set(asked)) == [("hedgespec", k, False), ("hedgespec", k, True), ("none", k, True)]
    assert set(result["tokens_per_s"]) == {"none", "hedgespec", "hedgespec-off"}


def test_bench_engines_kinds_that_name_a_k_run_on_their_own_engines_with_it(monkeypatch):
    """`kind@k=N` builds an engine whose config drafts at most N (`k`, what the proposer and vLLM's
    n-gram read); `hedgespec-off@k=8` shares `hedgespec@k=8`'s; a setting other than k=N, or a K
    the config refuses, is refused before any engine starts."""
    engines, built, asked = _engines_of_stand_ins(monkeypatch)
    config = load_config("serve_config.yaml")
    for kinds, error in ((["none", "hedgespec@n=8"], "only k=N"), (["none", "hedgespec@k=x"], "only k=N"),
                         (["none", "hedgespec@k=99"], "less than or equal to 16")):
        with pytest.raises(ValueError, match=error):
            engines.run(config, ["a b"], kinds, [1], 1, 4, repeats=1)
    assert built == []
    result = engines.run(config, ["a b"], ["none", "hedgespec", "hedgespec@k=8", "hedgespec-off@k=8", "ngram@k=3"],
                         [1], 1, 4, repeats=1)
    assert built == [("none", config.k), ("hedgespec", config.k), ("hedgespec", 8), ("ngram", 3)]
    assert ("hedgespec", 8, False) in asked and ("hedgespec", config.k, False) not in asked  # the no-draft kind's engine
    assert set(result["tokens_per_s"]) == {"none", "hedgespec", "hedgespec@k=8", "hedgespec-off@k=8", "ngram@k=3"}


def test_bench_proposer_holds_the_modes_it_is_given_and_refuses_an_unknown_one(monkeypatch, capsys):
    from hedgespec.bench import proposer
    from hedgespec.cli import main
    seen = []
    monkeypatch.setattr(proposer, "main", lambda *args: seen.append(args[-1]) or {})
    common = ["bench", "proposer", "--config", "configs/tiny.yaml", "--prompts", "benchmarks/prompts/edits.jsonl"]
    assert main(common) == 0 and main(common + ["--modes", "copy,none"]) == 0
    assert seen == [[None], ["copy", "none"]]  # None: the gate decides
    with pytest.raises(SystemExit) as exit_:
        main(common + ["--modes", "all,sometimes"])
    assert exit_.value.code == 2 and "unknown load-gate mode(s) sometimes" in capsys.readouterr().err


def test_bench_load_kinds_may_change_other_engine_settings_and_a_misspelt_one_fails_at_once():
    """`--kinds none,hedgespec@stream_interval=1`: each side an app of its own, with the config's
    target.vllm settings but the ones its kind changes; the config's model validates each."""
    from pydantic import ValidationError

    from deployments import sweep
    from deployments.local import serve_args
    args = serve_args("serve_config.yaml")
    apps, sides = sweep.plan(args, ["none", "hedgespec@stream_interval=1@max_num_seqs=8"], [], False)
    assert [side.label for side in sides] == ["none", "hedgespec@stream_interval=1@max_num_seqs=8"]
    assert len(set(apps)) == 2 and [side.app for side in sides] == list(apps)
    configured = args["engine"]["target"]["vllm"]
    base, changed = (apps[side.app]["engine"]["target"]["vllm"] for side in sides)
    assert base == configured | {"speculation": "none"}
    assert changed == configured | {"speculation": "hedgespec", "stream_interval": "1", "max_num_seqs": "8"}
    with pytest.raises(ValidationError, match="stream_intervall"):
        sweep.plan(args, ["none@stream_intervall=1"], [], False)
    with pytest.raises(ValueError, match="SETTING=VALUE"):
        sweep.plan(args, ["none@stream_interval"], [], False)

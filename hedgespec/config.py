"""Typed, strict configuration shared by the CLI, the benchmarks and serve_config.yaml.

Every model rejects unknown keys, so a typo in a YAML file is an error, not a silently ignored
setting. A file is either an engine config document or a Ray Serve config whose first
application's `args` hold one.
"""
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator


DrafterKind = Literal["lm", "prompt_lookup", "eagle", "datastore"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VLLMConfig(Strict):
    """The vLLM engine under the Target deployment (target.backend: vllm)."""
    speculation: Literal["hedgespec", "ngram", "none"] = Field(
        "hedgespec", description="hedgespec: the pool and the learner draft inside vLLM's steps (hedgespec.vllm_proposer); "
                                 "ngram: vLLM's own n-gram speculation; none: plain decoding (the two baselines)")
    ngram_max: int = Field(3, ge=1, le=16, description="vLLM's prompt_lookup_max (speculation ngram); "
                                                         "the load gate's copy steps (speculation hedgespec)")
    ngram_min: int = Field(2, ge=1, le=16, description="vLLM's prompt_lookup_min (speculation ngram); "
                                                         "the load gate's copy steps (speculation hedgespec)")
    enforce_eager: bool = Field(False, description="skip torch.compile: starts in ~40 s instead of 2.5-4.5 min on "
                                                   "2 CPU cores, and decodes slower (tests use it)")
    kv_cache_gib: float = Field(1.0, gt=0, description="CPU: VLLM_CPU_KVCACHE_SPACE; GPU: ignored (vLLM sizes it)")
    cpu_threads_bind: str = Field(
        "nobind", min_length=1, description="CPU: VLLM_CPU_OMP_THREADS_BIND. nobind: the model thread is not pinned (on "
                                            "2 cores, pinned to one, it gave 1.5-2.2x fewer tokens/s under load, README); "
                                            "auto: vLLM's pinning (many-core and NUMA machines), or cores such as 0-7")
    cpu_threads: int | None = Field(
        None, ge=1, description="CPU: the model's OpenMP threads (OMP_NUM_THREADS of vLLM's worker). None: one per "
                                "core this process may run on, as vLLM's own server runs; under Ray the engine would "
                                "otherwise inherit the Target's num_cpus (one thread at num_cpus 1). Set it where a CPU "
                                "quota, not a cpuset, limits the process (Kubernetes limits)")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="GPU: the share of its memory vLLM may take")
    max_model_len: int | None = Field(4096, ge=16, description="longest prompt + completion (None: the model's)")
    max_num_seqs: int = Field(32, ge=1, description="requests decoded in one batch")
    stream_interval: int = Field(
        1, ge=1, description="vLLM's stream_interval: a request's tokens reach the ingress in pieces of this many "
                             "(the first and last at once); fewer pieces through the serving path, coarser streaming")


VLLM_KINDS = ("prompt_lookup", "datastore")  # drafter kinds the vLLM backend runs (token ids only, no hidden states)


class TargetConfig(Strict):
    model: str = Field("smollm2", description="'smollm2', 'tiny:SEED[:LAYERS]' or a Hugging Face model folder")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 where the device computes it natively (a GPU, or a CPU with AVX512-BF16 "
                            "or AMX), else float32")
    device: str = "cpu"
    backend: Literal["hf", "vllm"] = Field(
        "hf", description="hf: our own HF runner, one forward at a time (every drafter kind, the exact tiny-model tests); "
                          "vllm: a vLLM engine, continuously batched, with the pool's prompt-lookup and datastore "
                          "drafters inside its steps")
    vllm: VLLMConfig = VLLMConfig()

    @model_validator(mode="after")
    def _vllm_models(self):
        if self.backend == "vllm" and self.model.startswith("tiny:"):
            raise ValueError("backend vllm loads a Hugging Face folder ('smollm2' or a path), not a tiny: model")
        return self


class DrafterConfig(Strict):
    name: str = Field(min_length=1)
    kind: DrafterKind
    model: str | None = Field(None, description="lm: a model name as for the target, sharing its tokenizer")
    artifact: str | None = Field(None, description="eagle (head .safetensors) / datastore (.npz): a path, "
                                                   "relative ones resolved against the cache directory")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_ngram: int = Field(3, ge=1, le=16, description="prompt_lookup / datastore: longest n-gram matched")
    min_ngram: int = Field(1, ge=1, le=16, description="prompt_lookup / datastore: sleeps unless a match has this many tokens")

    @model_validator(mode="after")
    def _kind_fields(self):
        if self.kind == "lm" and not self.model:
            raise ValueError(f"drafter {self.name!r}: kind 'lm' needs a model")
        if self.kind in ("eagle", "datastore") and not self.artifact:
            raise ValueError(f"drafter {self.name!r}: kind {self.kind!r} needs an artifact")
        if self.kind in ("prompt_lookup", "datastore") and self.min_ngram > self.max_ngram:
            raise ValueError(f"drafter {self.name!r}: min_ngram > max_ngram")
        return self


FULL_INFORMATION = ("hedgespec", "hedgespec-sleeping", "hedge")


class SelectorConfig(Strict):
    name: Literal["fixed", "hedgespec", "hedgespec-sleeping", "hedge", "ucbspec", "ucb1", "exp3spec", "rule", "router"] = "hedgespec"
    loss: Literal["time", "eal", "tap"] = Field(
        "time", description="full-information learners: time per committed token over (drafter, k) arms and the "
                            "plain step (the default), or the paper's tokens per round (eal, tap) over drafters at K")
    estimator: Literal["corrected", "paper"] = "corrected"
    delay: Literal["queue", "bold"] = "queue"
    act: Literal["argmax", "sample"] = "argmax"
    warm_start: bool = False
    drafter: str | None = Field(None, description="fixed: the drafter; rule: the primary (used when awake)")
    fallback: str | None = Field(None, description="rule: the drafter used when the primary sleeps; router: default route")
    routes: dict[str, str] = Field(default_factory=dict, description="router: domain -> drafter")
    delta: float = Field(0.05, gt=0, lt=1, description="ucbspec: confidence parameter")

    @property
    def objective(self) -> str:
        """The loss the feedback is built with: only full-information learners read it, and the
        others choose among drafters drafting K, which the EAL rows describe."""
        return self.loss if self.name in FULL_INFORMATION else "eal"

    @model_validator(mode="after")
    def _named_drafters(self):
        if self.name == "fixed" and not self.drafter:
            raise ValueError("selector 'fixed' needs `drafter`")
        if self.name == "rule" and not (self.drafter and self.fallback):
            raise ValueError("selector 'rule' needs `drafter` (primary) and `fallback`")
        if self.name == "router" and not (self.routes and self.fallback):
            raise ValueError("selector 'router' needs `routes` (domain -> drafter) and a `fallback` drafter")
        return self


def default_pool() -> list[DrafterConfig]:
    return [DrafterConfig(name="prompt-lookup", kind="prompt_lookup", max_ngram=3, min_ngram=1)]


PROJECT_ROOT = Path(__file__).resolve().parents[1]


def resolve_pool_file(path: str) -> Path:
    """A pool file as named in a config: absolute, or relative to the current directory, else to the
    project root (where `configs/` lives: a Serve replica or a KubeRay pod may run elsewhere)."""
    for candidate in (Path(path), PROJECT_ROOT / path):
        if candidate.is_file():
            return candidate
    raise ValueError(f"pool file {path!r} not found (relative paths: from the current directory or {PROJECT_ROOT})")


class EngineConfig(Strict):
    target: TargetConfig = TargetConfig()
    pool: str | None = Field(None, description=(
        "a YAML file whose `drafters` come first in the pool (configs/pool.yaml: the one definition of the "
        "embedded pool, shared by the experiments and the served app); `drafters` then lists only additions. "
        "Resolved when the config is loaded"))
    pool_kinds: list[DrafterKind] | None = Field(None, description=(
        "only the pool file's drafters of these kinds (the vLLM backend: prompt_lookup and datastore)"))
    drafters: list[DrafterConfig] = Field(default_factory=default_pool)
    k: int = Field(5, ge=1, le=16, description="draft tokens per round")
    selector: SelectorConfig = SelectorConfig()
    # measured on 2 shared cores: 2 threads were never faster than 1 for batch-1 decoding of the
    # 135M target, and at times 6x slower (OpenMP threads starved by a busy neighbour)
    threads: int | None = Field(1, ge=1, description="torch CPU threads per model process (None: torch's choice)")

    @model_validator(mode="before")
    @classmethod
    def _resolve_pool(cls, data):
        """`pool` is replaced by the file's drafters, so a resolved config (sent to a replica) is final."""
        if isinstance(data, dict) and data.get("pool"):
            document = yaml.safe_load(resolve_pool_file(data["pool"]).read_text()) or {}
            if not isinstance(document.get("drafters"), list):
                raise ValueError(f"pool file {data['pool']!r} has no `drafters` list")
            kinds = data.get("pool_kinds")
            chosen = [d for d in document["drafters"] if kinds is None or d.get("kind") in kinds]
            data = {**data, "pool": None, "pool_kinds": None, "drafters": chosen + list(data.get("drafters") or [])}
        return data

    @model_validator(mode="after")
    def _unique_names(self):
        names = [d.name for d in self.drafters]
        if len(set(names)) != len(names):
            raise ValueError(f"drafter names must be unique: {names}")
        for name in (self.selector.drafter, self.selector.fallback, *self.selector.routes.values()):
            if name is not None and name not in names:
                raise ValueError(f"selector names drafter {name!r}, which is not in the pool {names}")
        if self.pool_kinds is not None:
            raise ValueError("`pool_kinds` selects from a `pool` file: name one")
        other = [d.name for d in self.drafters if d.kind not in VLLM_KINDS]
        if self.target.backend == "vllm" and other:
            raise ValueError(f"backend vllm runs drafters of kinds {list(VLLM_KINDS)} only; {other} need the HF backend "
                             "(the target's hidden states or a second model; `pool_kinds` selects from a pool file)")
        return self


def _custom_only(resources: dict[str, float]) -> dict[str, float]:
    builtin = sorted({"CPU", "GPU", "memory", "object_store_memory"} & set(resources))
    if builtin:
        raise ValueError(f"{builtin}: set CPUs and GPUs with the num_cpus/num_gpus fields; resources are custom ones")
    return resources


# Custom Ray resources a replica needs, e.g. {"hedgespec_target": 1}: it is placed only on nodes that
# offer them (`ray start --resources`), which is how the target and the drafter groups are pinned.
CustomResources = Annotated[dict[Annotated[str, Field(min_length=1)], Annotated[float, Field(ge=0)]],
                            AfterValidator(_custom_only)]


class AutoscalingConfig(Strict):
    """Ray Serve autoscaling of a drafter group, on ongoing requests per replica. A replica that is
    scaled away takes its requests' drafter state with it: those requests go on without its drafters
    until they are rebuilt on another replica (deployments/adapters.py), so scale down gently (Serve
    waits `downscale_delay_s` before removing a replica)."""
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(4, ge=1, le=64)
    target_ongoing_requests: float = Field(8.0, gt=0)
    downscale_delay_s: float = Field(600.0, ge=0)

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_replicas < self.min_replicas:
            raise ValueError("autoscaling: max_replicas < min_replicas")
        return self


class GroupConfig(Strict):
    """A drafter group: one Ray Serve deployment hosting some drafters of the pool, named or by kind."""
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    drafters: list[str] = Field(default_factory=list, description="names from engine.drafters")
    kinds: list[DrafterKind] = Field(default_factory=list, description="or: every drafter of the pool of these kinds")
    num_replicas: int = Field(1, ge=1, le=64, description="fixed replica count (ignored with autoscaling)")
    autoscaling: AutoscalingConfig | None = None
    num_cpus: float = Field(0.25, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    resources: CustomResources = Field(default_factory=dict, description="custom Ray resources per replica")

    @model_validator(mode="after")
    def _one_selection(self):
        if bool(self.drafters) == bool(self.kinds):
            raise ValueError(f"group {self.name!r}: name its `drafters` or their `kinds`, one of the two")
        return self


class LimitsConfig(Strict):
    """What one request, one API key and the whole app may ask of the server. Each breach gets a
    clear error: 400 (prompt, max_tokens, stop), 413 (body), 429 (per key), 503 (queue), the last two
    with Retry-After."""
    max_body_bytes: int = Field(1 << 20, ge=1024, description="request body size, in bytes")
    max_prompt_tokens: int = Field(4096, ge=1)
    max_tokens: int = Field(2048, ge=1, description="largest max_tokens a request may ask for")
    max_stop_sequences: int = Field(4, ge=0, le=64)
    max_stop_chars: int = Field(256, ge=1, description="longest stop string, in characters")
    max_concurrent_per_key: int = Field(16, ge=1, description="requests in flight per API key, per ingress replica "
                                                              "(an open server, without keys, has only the queue)")
    max_ongoing_requests: int = Field(32, ge=1, description="requests the ingress decodes at once")
    max_queued_requests: int = Field(64, ge=0, description="requests that may wait for a decode slot; beyond: 503")
    retry_after_s: int = Field(1, ge=1, description="the Retry-After of a 429 or 503")


class ServeConfig(Strict):
    """The `args` of the Ray Serve application (serve_config.yaml)."""
    engine: EngineConfig = EngineConfig()
    groups: list[GroupConfig] = Field(default_factory=list, description="default: one group with every drafter")
    model_name: str = Field("hedgespec", min_length=1, description="the OpenAI `model` id the server answers to")
    limits: LimitsConfig = LimitsConfig()
    api_key_env: str | None = Field("HEDGESPEC_API_KEY", min_length=1, description=(
        "the environment variable holding the API keys (comma-separated) of which every route but /health "
        "requires one (Authorization: Bearer KEY); unset or empty: open. Keys never sit in the config, so they "
        "never reach a log"))
    target_num_cpus: float = Field(0.5, ge=0)
    target_num_gpus: float = Field(0.0, ge=0)
    target_resources: CustomResources = Field(default_factory=dict, description="custom Ray resources of the target")
    small_num_cpus: float = Field(0.1, ge=0, description="ingress and selector")

    @model_validator(mode="after")
    def _groups_cover_pool(self):
        names = [d.name for d in self.engine.drafters]
        if self.engine.target.backend == "vllm" and self.groups:
            raise ValueError("backend vllm runs the pool's drafters inside the engine's steps: no `groups`")
        if self.engine.selector.delay != "queue":
            raise ValueError("the Serve selector runs the queue delay reduction (selector.delay: queue)")
        groups = self.drafter_groups()
        empty = [g.name for g in groups if not g.drafters]
        if empty:
            raise ValueError(f"groups {empty} hold no drafter of the pool {names}")
        placed = [d for g in groups for d in g.drafters]
        if self.groups and sorted(placed) != sorted(names):
            raise ValueError(f"groups must place every drafter exactly once: pool {names}, groups {placed}")
        return self

    def drafter_groups(self) -> list[GroupConfig]:
        """The groups with their drafters named (a group by kind gets the pool's drafters of its kinds, in order)."""
        names = [d.name for d in self.engine.drafters]
        if not self.groups:
            return [GroupConfig(name="drafters", drafters=names)] if names else []
        return [g if g.drafters else g.model_copy(update={"drafters": [d.name for d in self.engine.drafters if d.kind in g.kinds],
                                                           "kinds": []})
                for g in self.groups]


def load_serve_config(path: str | Path) -> ServeConfig:
    """The first application's `args` of a Serve config file."""
    document = yaml.safe_load(Path(path).read_text()) or {}
    return ServeConfig.model_validate(document["applications"][0].get("args", {}))


def load_config(path: str | Path | None) -> EngineConfig:
    """An engine config from a YAML file (engine document or Serve config), or the default."""
    if path is None:
        return EngineConfig()
    document = yaml.safe_load(Path(path).read_text()) or {}
    if "applications" in document:
        return load_serve_config(path).engine
    return EngineConfig.model_validate(document)

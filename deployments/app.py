"""`serve run serve_config.yaml` entry point: the application graph built from the typed config."""
from ray.serve import Application
from ray.serve.config import BackpressureConfig

from deployments.drafter_group import DrafterGroup
from deployments.ingress import Ingress
from deployments.selector import SelectorDeployment
from deployments.target import TargetDeployment
from deployments.vllm_target import VLLMTargetDeployment
from hedgespec.config import ServeConfig


def build_app(args: dict) -> Application:
    config = ServeConfig.model_validate(args)
    engine = config.engine
    by_name = {d.name: d for d in engine.drafters}
    placement = {"ray_actor_options": {"num_cpus": config.target_num_cpus, "num_gpus": config.target_num_gpus,
                                       "resources": config.target_resources}}
    small = {"num_cpus": config.small_num_cpus}
    limits = config.limits
    # the HF decode loop runs in the ingress's worker threads and calls the other deployments through
    # blocking handles; Serve's throughput-optimized mode (README, "The serving path: HAProxy and gRPC")
    # runs a replica's router on its event loop, which those threads cannot use, so that ingress keeps
    # its router on a loop of its own
    own_router_loop = {} if engine.target.backend == "vllm" else {
        "runtime_env": {"env_vars": {"RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "1"}}}
    # Serve's own queue in front of the ingress: beyond it a 503 with Retry-After, before any work is done
    ingress = Ingress.options(ray_actor_options=small | own_router_loop,
                              max_ongoing_requests=limits.max_ongoing_requests,
                              max_queued_requests=limits.max_queued_requests,
                              backpressure_config=BackpressureConfig(status_code=503, retry_after_s=limits.retry_after_s))
    if engine.target.backend == "vllm":
        # the drafters and the learners run inside the engine's steps (hedgespec.vllm_proposer says why); the
        # Selector merges what they learn across requests (deployments/vllm_target.py)
        names = [d.name for d in engine.drafters]
        selector = SelectorDeployment.options(ray_actor_options=small).bind(engine.selector.model_dump(), names, engine.k)
        target = VLLMTargetDeployment.options(**placement).bind(engine.model_dump(), selector)
        return ingress.bind(config.model_dump(), target, [], selector, [])
    target = TargetDeployment.options(**placement).bind(engine.target.model_dump(), engine.threads, engine.k)
    groups, names = [], []
    for group in config.drafter_groups():
        scaling = ({"autoscaling_config": group.autoscaling.model_dump()} if group.autoscaling
                   else {"num_replicas": group.num_replicas})
        groups.append(DrafterGroup.options(
            name=f"DrafterGroup-{group.name}", **scaling,
            ray_actor_options={"num_cpus": group.num_cpus, "num_gpus": group.num_gpus, "resources": group.resources},
        ).bind([by_name[n].model_dump() for n in group.drafters], engine.target.model_dump(), engine.threads,
                engine.k))
        names.append(group.drafters)
    # the selector's indices follow the groups' order, as the ingress's pool does
    selector = SelectorDeployment.options(ray_actor_options=small).bind(
        engine.selector.model_dump(), [n for group in names for n in group], engine.k)
    return ingress.bind(config.model_dump(), target, groups, selector, names)

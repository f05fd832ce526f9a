"""The Ingress: OpenAI-compatible HTTP in front of the decode loop.

Each request's loop runs in a worker thread over the handle adapters (adapters.py); text deltas
come back to the event loop for server-sent events. On the vLLM backend there is no loop here: the
engine decodes and speculates, and the ingress reads its stream of tokens on the event loop. A
client that goes away sets the request's cancel flag: the loop stops at its next round and frees
the request's state in every deployment. The door (access.py: the API key and the body size), the
body's checks (admission.py) and the per-key limit come before any work;
a failure inside reaches the client as a 503 (the target is down) or a 500 that names only the
request id, under which the log holds the traceback.
"""
import asyncio
import functools
import logging
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from ray import serve
from ray.serve.exceptions import RequestCancelledError

from deployments import openai_api as api
from deployments.access import Door, api_keys
from deployments.admission import Admission, CallerSlots, Job
from deployments.adapters import TARGET_TIMEOUT_S, RemoteSelector, RemoteTarget, Unavailable, lost, routed
from deployments.dashboard import PAGE, LiveStats
from deployments.metrics import INGRESS_METRICS, Recorder, error_kind, record_generation
from deployments.remote_pool import RemotePool
from hedgespec.arms import RoundCosts
from hedgespec.calibration import DepthCalibration
from hedgespec.config import ServeConfig
from hedgespec.decode import Cancelled, Generation, Request as DecodeRequest, decode
from hedgespec.engine import build_selector, delayed_losses
from hedgespec.models import loading
from hedgespec.text import TextStream
from hedgespec.vllm_engine import speculation_args

STATS_TIMEOUT_S = 5.0
HEALTH_TIMEOUT_S = 2.0  # a Target that answers no sooner is not ready
logger = logging.getLogger("ray.serve")
app = FastAPI(title="HedgeSpec Serve")
app.add_middleware(Door)


@app.exception_handler(api.APIError)
async def _api_error(request: Request, error: api.APIError):
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


@app.exception_handler(Exception)
async def _internal_error(request: Request, error: Exception):
    incident = uuid.uuid4().hex
    logger.error("unhandled error %s on %s", incident, request.url.path, exc_info=error)
    return JSONResponse(api.APIError(500, f"internal error (incident {incident})").body(), status_code=500)


async def _ask(method, otherwise="unavailable", timeout_s: float = STATS_TIMEOUT_S):
    """A deployment's answer to a /health, /stats or /dashboard question, or `otherwise` where it gives none in time."""
    try:
        return await asyncio.wait_for(method.remote(), timeout_s)
    except Exception:
        return otherwise


@serve.deployment(name="Ingress")
@serve.ingress(app)
class Ingress:
    def __init__(self, args: dict, target, groups: list, selector, group_drafters: list[list[str]]):
        self.config = ServeConfig.model_validate(args)
        limits = self.config.limits
        app.openapi = functools.partial(api.openapi, app, self.config.model_name)
        app.state.door = {"keys": api_keys(self.config.api_key_env), "max_body_bytes": limits.max_body_bytes}
        target_config = self.config.engine.target
        self.tokenizer = loading.load_tokenizer(target_config.model)
        self.eos_ids = loading.eos_ids(target_config.model)
        context = loading.context_length(target_config.model)
        self.vllm = target_config.backend == "vllm"
        if self.vllm and target_config.vllm.max_model_len:
            context = min(context, target_config.vllm.max_model_len)
        self.admission = Admission(self.config, self.tokenizer, context)
        self.target, self.selector = routed(target), routed(selector)
        self.groups = list(zip(map(routed, groups), group_drafters))
        self.loops = ThreadPoolExecutor(limits.max_ongoing_requests, thread_name_prefix="decode")
        # evaluations and learner steps wait here; separate from the loops so they can never starve them
        self.background = ThreadPoolExecutor(4 * limits.max_ongoing_requests, thread_name_prefix="background")
        self.in_flight: dict[str, threading.Event] = {}
        self.slots = CallerSlots(limits.max_concurrent_per_key, limits.retry_after_s)
        self.counting = threading.Lock()  # recovered changes on the decode threads
        self.cancelled = 0  # requests whose client went away before the end
        self.recovered = Counter()  # requests rebuilt on a drafter group or selector after a failure
        self.metrics = Recorder(*INGRESS_METRICS)
        self.live = LiveStats([d.name for d in self.config.engine.drafters])
        # what rounds cost as this replica's decode loops see them (remote hops included): the time
        # objective's prices, shared by every request this replica serves
        self.costs = RoundCosts(len(self.config.engine.drafters), self.config.engine.k)
        self.calibration = DepthCalibration(len(self.config.engine.drafters), self.config.engine.k)

    @app.get("/health")
    async def health(self):
        """200 once the Target answers, 503 before: while its model loads (minutes for a compiled
        vLLM engine) or after it died, a load balancer polling this sends the replica no traffic."""
        if await _ask(self.target.ready, False, HEALTH_TIMEOUT_S) is not True:
            raise api.APIError(503, "the model is not ready (loading or restarting); retry later", None, "unavailable",
                               self.config.limits.retry_after_s)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.config.model_name, "object": "model", "owned_by": "hedgespec",
                                             "created": 0, "target": self.config.engine.target.model}]}

    @app.get("/stats")
    async def stats(self):
        """Per-request state held anywhere in the app: all zeros once requests have ended (a
        deployment that does not answer shows as "unavailable"); on vLLM also what the learners
        have shared through the Selector and what they price a step with."""
        groups = {}
        for handle, names in self.groups:
            groups["+".join(names)] = await _ask(handle.active)
        return {"in_flight": len(self.in_flight), "cancelled": self.cancelled, "recovered": dict(self.recovered),
                "target": await _ask(self.target.active),
                "selector": await _ask(self.selector.active) if self.groups else 0, "groups": groups,
                **({"shared_priors": await _ask(self.selector.shared), "step_costs": await _ask(self.target.costs)}
                   if self.vllm else {})}

    @app.get("/dashboard", response_class=HTMLResponse)
    async def dashboard(self):
        return PAGE

    @app.get("/dashboard/data")
    async def dashboard_data(self):
        return self.live.snapshot(await _ask(self.selector.weights, {}) if self.groups else {})

    @app.post("/v1/completions", openapi_extra=api.schema(api.CompletionBody))
    async def completions(self, request: Request):
        return await self._serve(request, chat=False)

    @app.post("/v1/chat/completions", openapi_extra=api.schema(api.ChatBody))
    async def chat_completions(self, request: Request):
        return await self._serve(request, chat=True)

    async def _serve(self, request: Request, chat: bool):
        self.metrics.count("hedgespec_requests", endpoint="chat" if chat else "completions")
        try:
            body, job = self.admission.accept(await request.body(), chat, request.scope.get("hedgespec.api_key"))
            self.slots.take(job.caller)  # `_settle` gives it back however the request ends
        except api.APIError as error:
            self.metrics.count("hedgespec_request_errors", kind=error_kind(error.status, error.code))
            raise
        if body.stream:
            return self._stream(job, chat, body)
        generation = await self._run(job, request)
        return api.response(chat, job.response_id, body.model, generation.text, generation.finish_reason,
                            api.usage(len(job.tokens), len(generation.tokens)), generation.stats())

    def _generate(self, job: Job, on_text=None) -> Generation:
        rid = job.request_id
        self.in_flight[rid] = job.cancel
        pool = selector = None
        try:
            pool = RemotePool(self.groups, rid, self.background) if self.groups and job.speculate else None
            if pool and job.selector.name == "fixed":  # a pinned drafter: no learner to ask, none to wait for
                selector = build_selector(job.selector, pool.names, job.k, job.seed)
            elif pool:
                selector = RemoteSelector(self.selector, rid, self.background, job.seed, job.selector, job.k)
            losses = delayed_losses(job.selector, len(pool.names), job.k, self.costs, self.calibration) if pool else None
            stream = TextStream(self.tokenizer, job.max_tokens, job.stop, self.eos_ids)
            request = DecodeRequest(job.tokens, job.max_tokens, job.sampling, job.seed, job.stop, job.text, rid)
            generation = decode(request, RemoteTarget(self.target, rid), pool, selector, stream, job.k, losses,
                                on_text, job.cancel.is_set)
        except Exception as error:
            self._failed(job, error)
            raise
        finally:
            try:
                if selector:
                    selector.end()
            finally:
                self._settle(job)
                with self.counting:
                    if pool and pool.rebuilds:
                        self.recovered["groups"] += pool.rebuilds
                    if getattr(selector, "recoveries", 0):
                        self.recovered["selector"] += selector.recoveries
        return self._answered(job, generation)

    async def _generate_vllm(self, job: Job, on_text=None) -> Generation:
        """The vLLM engine's pieces through the same TextStream (EOS, max_tokens and stop strings end
        the text as on the HF backend); closing the stream early (a stop string, a client gone)
        aborts the request in vLLM and frees its state there."""
        rid, start = job.request_id, time.perf_counter()
        stream = TextStream(self.tokenizer, job.max_tokens, job.stop, self.eos_ids)
        speculation = speculation_args(job.speculate, job.selector, job.k)
        self.in_flight[rid] = job.cancel
        rounds = []
        pieces = self.target.options(stream=True).generate.remote(rid, job.tokens, job.max_tokens, job.sampling,
                                                                     job.seed, speculation)
        try:
            while stream.finish_reason is None:
                if job.cancel.is_set():
                    raise Cancelled(rid)
                try:
                    piece = await asyncio.wait_for(pieces.__anext__(), TARGET_TIMEOUT_S)
                except StopAsyncIteration:
                    raise RuntimeError(f"the engine ended request {rid} before its text did") from None
                except Exception as error:
                    if lost(error):  # the engine's replica died or did not answer in time
                        raise Unavailable(rid) from error
                    raise
                rounds = piece.rounds or rounds
                delta = stream.push(piece.tokens)
                if delta and on_text:
                    on_text(delta)
        except (asyncio.CancelledError, RequestCancelledError):  # Serve cancels the engine's stream with the request of a client gone
            self._failed(job, Cancelled(rid))
            raise
        except Exception as error:
            self._failed(job, error)
            raise
        finally:
            pieces.cancel()
            self._settle(job)
        return self._answered(job, Generation(stream.tokens, stream.text, stream.finish_reason, rounds,
                                              time.perf_counter() - start))

    def _failed(self, job: Job, error: Exception) -> None:
        if isinstance(error, Cancelled):
            self.cancelled += 1
            self.metrics.count("hedgespec_request_errors", kind="client_closed")
        elif isinstance(error, Unavailable):
            self.metrics.count("hedgespec_request_errors", kind="unavailable")
        else:
            self.metrics.count("hedgespec_request_errors", kind="generation_failed")
            logger.exception("request %s failed", job.request_id, exc_info=error)

    def _settle(self, job: Job) -> None:
        """However the request ended: it is no longer in flight, and its caller's slot is free."""
        self.in_flight.pop(job.request_id, None)
        self.slots.give_back(job.caller)

    def _answered(self, job: Job, generation: Generation) -> Generation:
        record_generation(self.metrics, generation, len(job.tokens))
        self.live.record(job.response_id, generation)
        return generation

    def _start(self, job: Job, on_text=None) -> asyncio.Future:
        """The request's generation, begun now: the decode loop in a worker thread over the HF target
        and the remote pool, or, on the vLLM backend, the engine's stream read on the event loop."""
        if self.vllm:
            return asyncio.ensure_future(self._generate_vllm(job, on_text))
        return asyncio.get_running_loop().run_in_executor(self.loops, self._generate, job, on_text)

    async def _run(self, job: Job, request: Request) -> Generation:
        future = self._start(job)
        try:
            while not future.done():
                await asyncio.wait([future], timeout=0.25)
                if not future.done() and await request.is_disconnected():
                    job.cancel.set()
        except asyncio.CancelledError:  # Serve cancels the handler when its client disconnects
            job.cancel.set()
            raise
        try:
            return future.result()
        except Exception as error:
            raise self._failure(job, error) from None

    def _failure(self, job: Job, error: Exception) -> api.APIError:
        """What the client is told about a request that failed inside (the log has the rest)."""
        if isinstance(error, Cancelled):
            return api.APIError(499, "the client closed the request")
        if isinstance(error, Unavailable):
            return api.APIError(503, "the model is restarting; retry the request", None, "unavailable",
                                self.config.limits.retry_after_s)
        return api.APIError(500, f"internal error (request {job.request_id})")

    def _stream(self, job: Job, chat: bool, body) -> StreamingResponse:
        """Starts the loop now (so that it ends, and frees the caller's slot, even if the client is
        gone before the first byte) and streams its text as server-sent events."""
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue = asyncio.Queue()
        on_text = lambda delta: loop.call_soon_threadsafe(deltas.put_nowait, delta)  # noqa: E731
        future = self._start(job, on_text)
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(deltas.put_nowait, None))
        return StreamingResponse(self._events(job, chat, body, future, deltas), media_type="text/event-stream")

    async def _events(self, job: Job, chat: bool, body, future, deltas: asyncio.Queue):
        rid = job.response_id
        try:
            if chat:
                yield api.sse(api.chunk(chat, rid, body.model, None, None) | api.role_delta())
            while (delta := await deltas.get()) is not None:
                yield api.sse(api.chunk(chat, rid, body.model, delta, None))
            try:
                generation = future.result()
            except Exception as error:
                failure = self._failure(job, error)
                yield api.sse(failure.body() | {"status": failure.status})
                return
            extra = {"hedgespec": generation.stats()}
            if body.include_usage:
                extra["usage"] = api.usage(len(job.tokens), len(generation.tokens))
            yield api.sse(api.chunk(chat, rid, body.model, None if chat else "", generation.finish_reason, extra))
            yield "data: [DONE]\n\n"
        finally:
            job.cancel.set()  # a client that left mid-stream: the loop stops at its next round and frees state

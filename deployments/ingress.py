"""The Ingress: OpenAI-compatible HTTP in front of the decode loop.

Each request's loop runs in a worker thread over the handle adapters (adapters.py); text deltas
come back to the event loop for server-sent events. A client that goes away sets the request's
cancel flag: the loop stops at its next round and frees the request's state in every deployment.
"""
import asyncio
import json
import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from ray import serve

from deployments import openai_api as api
from deployments.adapters import RemotePool, RemoteSelector, RemoteTarget
from deployments.dashboard import PAGE, LiveStats
from deployments.metrics import INGRESS_METRICS, Recorder, error_kind, record_generation
from hedgespec.arms import RoundCosts
from hedgespec.calibration import DepthCalibration
from hedgespec.config import SelectorConfig, ServeConfig
from hedgespec.decode import Cancelled, Generation, Request as DecodeRequest, decode
from hedgespec.engine import delayed_losses
from hedgespec.models import loading
from hedgespec.sampling import Sampling
from hedgespec.text import TextStream, encode_prompt

MAX_CONCURRENT = 32
app = FastAPI(title="HedgeSpec Serve")


@app.exception_handler(api.APIError)
async def _api_error(request: Request, error: api.APIError):
    return JSONResponse(error.body(), status_code=error.status)


class _Job:
    def __init__(self, request_id, response_id, tokens, text, max_tokens, sampling, seed, stop, speculate,
                 selector: SelectorConfig, k: int):
        self.request_id, self.response_id = request_id, response_id
        self.tokens, self.text, self.max_tokens = tokens, text, max_tokens
        self.sampling, self.seed, self.stop, self.speculate = sampling, seed, list(stop or []), speculate
        self.selector, self.k = selector, k  # the server's, or what the request's `speculation` asked for
        self.cancel = threading.Event()


def _role_delta() -> dict:
    return {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}]}


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


@serve.deployment(name="Ingress", max_ongoing_requests=MAX_CONCURRENT)
@serve.ingress(app)
class Ingress:
    def __init__(self, args: dict, target, groups: list, selector, group_drafters: list[list[str]]):
        self.config = ServeConfig.model_validate(args)
        model = self.config.engine.target.model
        self.tokenizer = loading.load_tokenizer(model)
        self.eos_ids = loading.eos_ids(model)
        self.context = loading.context_length(model)
        self.target, self.selector = target, selector
        self.groups = list(zip(groups, group_drafters))
        self.loops = ThreadPoolExecutor(MAX_CONCURRENT, thread_name_prefix="decode")
        # evaluations and learner steps wait here; separate from the loops so they can never starve them
        self.background = ThreadPoolExecutor(4 * MAX_CONCURRENT, thread_name_prefix="background")
        self.in_flight: dict[str, threading.Event] = {}
        self.cancelled = 0  # requests whose client went away before the end
        self.metrics = Recorder(*INGRESS_METRICS)
        self.live = LiveStats([d.name for d in self.config.engine.drafters])
        # what rounds cost as this replica's decode loops see them (remote hops included): the time
        # objective's prices, shared by every request this replica serves
        self.costs = RoundCosts(len(self.config.engine.drafters), self.config.engine.k)
        self.calibration = DepthCalibration(len(self.config.engine.drafters), self.config.engine.k)

    @app.get("/health")
    async def health(self):
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.config.model_name, "object": "model", "owned_by": "hedgespec",
                                             "created": 0, "target": self.config.engine.target.model}]}

    @app.get("/stats")
    async def stats(self):
        """Per-request state held anywhere in the app: all zeros once requests have ended."""
        groups = {}
        for handle, names in self.groups:
            groups["+".join(names)] = await handle.active.remote()
        return {"in_flight": len(self.in_flight), "cancelled": self.cancelled, "target": await self.target.active.remote(),
                "selector": await self.selector.active.remote() if self.groups else 0, "groups": groups}

    @app.get("/dashboard", response_class=HTMLResponse)
    async def dashboard(self):
        return PAGE

    @app.get("/dashboard/data")
    async def dashboard_data(self):
        return self.live.snapshot(await self.selector.weights.remote() if self.groups else {})

    @app.post("/v1/completions")
    async def completions(self, request: Request):
        return await self._serve(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        return await self._serve(request, chat=True)

    async def _serve(self, request: Request, chat: bool):
        self.metrics.count("hedgespec_requests", endpoint="chat" if chat else "completions")
        try:
            body, job = await self._accept(request, chat)
        except api.APIError as error:
            self.metrics.count("hedgespec_request_errors", kind=error_kind(error.status, error.code))
            raise
        if body.stream:
            return StreamingResponse(self._events(job, chat, body), media_type="text/event-stream")
        generation = await self._run(job, request)
        return api.response(chat, job.response_id, body.model, generation.text, generation.finish_reason,
                            api.usage(len(job.tokens), len(generation.tokens)), generation.stats())

    async def _accept(self, request: Request, chat: bool) -> tuple:
        """The validated body and the job it asks for; an APIError for bad input."""
        try:
            payload = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise api.APIError(400, "the request body is not valid JSON") from None
        body = api.parse(api.ChatBody if chat else api.CompletionBody, payload)
        if body.model != self.config.model_name:
            raise api.APIError(404, f"model {body.model!r} does not exist; this server serves "
                                    f"{self.config.model_name!r}", "model", "model_not_found")
        prompt = [m.model_dump(exclude_none=True) for m in body.messages] if chat else body.prompt
        tokens = encode_prompt(self.tokenizer, prompt, chat)
        max_tokens = self._budget(tokens, body.limit if chat else body.max_tokens)
        text = "\n".join(m["content"] for m in prompt) if chat else prompt
        selector, k = self._speculation(body.speculation)
        return body, _Job(uuid.uuid4().hex, api.completion_id(chat), tokens, text, max_tokens,
                          Sampling(body.temperature, body.top_k, body.top_p),
                          body.seed if body.seed is not None else random.getrandbits(31), body.stop, body.speculate,
                          selector, k)

    def _speculation(self, asked: api.Speculation | None) -> tuple[SelectorConfig, int]:
        """The selector and K of a request: the server's, with the request's `speculation` applied."""
        engine = self.config.engine
        selector, k = engine.selector, engine.k
        if asked is None:
            return selector, k
        if asked.k is not None:
            if asked.k > engine.k:
                raise api.APIError(400, f"speculation.k={asked.k} is above this server's K of {engine.k}", "speculation.k")
            k = asked.k
        if asked.drafter is not None:
            names = [d.name for d in engine.drafters]
            if asked.drafter not in names:
                raise api.APIError(400, f"speculation.drafter {asked.drafter!r} is not in the pool {names}",
                                   "speculation.drafter")
            selector = SelectorConfig(name="fixed", drafter=asked.drafter)
        if asked.objective is not None:
            selector = selector.model_copy(update={"loss": asked.objective})
        return selector, k

    def _budget(self, tokens: list[int], asked: int | None) -> int:
        limit, k = self.config.max_tokens_limit, self.config.engine.k
        if len(tokens) > self.config.max_prompt_tokens:
            raise api.APIError(400, f"the prompt has {len(tokens)} tokens; this server takes at most "
                                    f"{self.config.max_prompt_tokens}", "prompt", "context_length_exceeded")
        room = self.context - len(tokens) - k - 1  # a round may hold K drafts beyond the last kept token
        if asked is None:
            asked = min(limit, room)
        if asked > limit:
            raise api.APIError(400, f"max_tokens={asked} is above this server's limit of {limit}", "max_tokens")
        if asked > room or room < 1:
            raise api.APIError(400, f"the prompt ({len(tokens)} tokens) plus max_tokens={asked} does not fit the "
                                    f"model's context of {self.context}", "max_tokens", "context_length_exceeded")
        return asked

    def _generate(self, job: _Job, on_text=None) -> Generation:
        rid = job.request_id
        pool = RemotePool(self.groups, rid, self.background) if self.groups and job.speculate else None
        selector = RemoteSelector(self.selector, rid, self.background, job.seed, job.selector, job.k) if pool else None
        losses = delayed_losses(job.selector, len(pool.names), job.k, self.costs, self.calibration) if pool else None
        stream = TextStream(self.tokenizer, job.max_tokens, job.stop, self.eos_ids)
        request = DecodeRequest(job.tokens, job.max_tokens, job.sampling, job.seed, job.stop, job.text, rid)
        self.in_flight[rid] = job.cancel
        try:
            generation = decode(request, RemoteTarget(self.target, rid), pool, selector, stream, job.k, losses,
                                on_text, job.cancel.is_set)
        except Cancelled:
            self.cancelled += 1
            self.metrics.count("hedgespec_request_errors", kind="client_closed")
            raise
        except Exception:
            self.metrics.count("hedgespec_request_errors", kind="generation_failed")
            raise
        finally:
            try:
                if selector:
                    selector.end()
            finally:
                self.in_flight.pop(rid, None)
        record_generation(self.metrics, generation, len(job.tokens))
        self.live.record(job.response_id, generation)
        return generation

    async def _run(self, job: _Job, request: Request) -> Generation:
        future = asyncio.get_running_loop().run_in_executor(self.loops, self._generate, job)
        while not future.done():
            await asyncio.wait([future], timeout=0.25)
            if not future.done() and await request.is_disconnected():
                job.cancel.set()
        try:
            return future.result()
        except Cancelled:
            raise api.APIError(499, "the client closed the request") from None
        except Exception as error:
            raise api.APIError(500, f"generation failed: {error}") from None

    async def _events(self, job: _Job, chat: bool, body):
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue = asyncio.Queue()
        on_text = lambda delta: loop.call_soon_threadsafe(deltas.put_nowait, delta)  # noqa: E731
        future = loop.run_in_executor(self.loops, self._generate, job, on_text)
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(deltas.put_nowait, None))
        rid = job.response_id
        try:
            if chat:
                yield _sse(api.chunk(chat, rid, body.model, None, None) | _role_delta())
            while (delta := await deltas.get()) is not None:
                yield _sse(api.chunk(chat, rid, body.model, delta, None))
            try:
                generation = future.result()
            except Exception as error:
                yield _sse(api.APIError(500, f"generation failed: {error}").body())
                return
            extra = {"hedgespec": generation.stats()}
            if body.include_usage:
                extra["usage"] = api.usage(len(job.tokens), len(generation.tokens))
            yield _sse(api.chunk(chat, rid, body.model, None if chat else "", generation.finish_reason, extra))
            yield "data: [DONE]\n\n"
        finally:
            job.cancel.set()  # a client that left mid-stream: the loop stops at its next round and frees state

"""The OpenAI-compatible request bodies, their validation, the response shapes (whole, and as
server-sent events) and the OpenAPI schema.

Every field is checked here, at the door: types strictly (no "5" for 5), ranges, lengths. Unknown
fields are rejected (as OpenAI does) rather than silently ignored; the parameters this server
cannot honour (n > 1, logprobs, penalties) get a 400 that says so. The limits that an operator
sets (stop strings, prompt tokens, max_tokens) are checked by the ingress against its config.
"""
import json
import time
import uuid
from typing import Annotated, Literal

from fastapi.openapi.utils import get_openapi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

INT64 = 2**63
SEED_SPACE = 2**62  # seeds are folded into [0, 2^62): every drafter's seed (seed + 1 + j) stays a valid torch seed
GREEDY_BELOW = 1e-5  # temperatures under this decode greedily (as vLLM does): 1/T would overflow the logits
NAME_CHARS = 256


def _unicode(text: str) -> str:
    """JSON may carry lone surrogates ("\\ud800"), which are no text: no tokenizer takes them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode text (a lone surrogate)") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Speculation(_Strict):
    """extension: how this request speculates (comparisons and pinned workloads); unset fields keep the server's."""
    drafter: Text | None = Field(None, min_length=1, max_length=NAME_CHARS, description="pin one drafter of the pool for every round")
    k: int | None = Field(None, ge=1, le=64, description="draft tokens per round (at most the server's K)")
    objective: Literal["time", "eal", "tap"] | None = Field(None, description="the learner's loss")


class StreamOptions(_Strict):
    include_usage: bool = False


class _Body(_Strict):
    model: Text = Field(max_length=NAME_CHARS)
    max_tokens: int | None = Field(None, ge=1, lt=INT64)
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int = Field(0, ge=0, lt=INT64, description="extension (as in vLLM): 0 = off")
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Text | list[Text] | None = Field(None, description="up to the server's max_stop_sequences non-empty strings")
    seed: int | None = Field(None, ge=-INT64, lt=INT64, description="any 64-bit integer")
    user: Text | None = Field(None, max_length=NAME_CHARS)
    speculate: bool = Field(True, description="extension: false decodes with the target alone (for comparisons)")
    speculation: Speculation | None = None

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def decode_seed(self) -> int | None:
        return None if self.seed is None else self.seed % SEED_SPACE

    @property
    def decode_temperature(self) -> float:
        return 0.0 if self.temperature < GREEDY_BELOW else self.temperature


class CompletionBody(_Body):
    prompt: Text | list[Text]
    max_tokens: int | None = Field(16, ge=1, lt=INT64)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt):
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ValueError("exactly one prompt per request")
            prompt = prompt[0]
        if not prompt:
            raise ValueError("the prompt is empty")
        return prompt


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: Text
    name: Text | None = Field(None, max_length=NAME_CHARS)


class ChatBody(_Body):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, lt=INT64)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


REF = "#/components/schemas/{model}"


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = {"Retry-After": str(retry_after_s)} if retry_after_s else {}

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def parse(body_cls: type[_Body], payload) -> _Body:
    try:
        return body_cls.model_validate(payload)
    except ValidationError as error:
        # of a union's failed members, the one that got furthest into the value says most
        first = max(error.errors(), key=lambda e: len(e["loc"]))
        param = ".".join(str(p) for p in first["loc"] if not _union_member(p)) or None
        raise APIError(400, f"{param}: {first['msg']}" if param else first["msg"], param) from None


def _union_member(part) -> bool:
    """pydantic names the member of a union in an error's location ('str', 'list[...]'): no field."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)


def schema(body_cls: type[_Body]) -> dict:
    """The OpenAPI request body of an endpoint (the routes parse bodies themselves, so that every
    error, malformed JSON included, gets this module's error shape); its $defs are `definitions()`."""
    body = body_cls.model_json_schema(ref_template=REF)
    body.pop("$defs", None)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": body}}}}


def definitions() -> dict:
    """The component schemas that the request bodies refer to."""
    return {name: definition for body_cls in (CompletionBody, ChatBody)
            for name, definition in body_cls.model_json_schema(ref_template=REF).get("$defs", {}).items()}


def completion_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def response(chat: bool, rid: str, model: str, text: str, finish: str, usage_: dict, stats: dict) -> dict:
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
              if chat else {"index": 0, "text": text, "finish_reason": finish, "logprobs": None})
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice], "usage": usage_, "hedgespec": stats}


def chunk(chat: bool, rid: str, model: str, text: str | None, finish: str | None, extra: dict | None = None) -> dict:
    if chat:
        delta = {} if text is None else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice], **(extra or {})}


def role_delta() -> dict:
    """A chat stream's first chunk names the speaker, as OpenAI's does."""
    return {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}]}


def sse(payload: dict) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(payload)}\n\n"


def openapi(served, model_name: str) -> dict:
    """FastAPI's schema for the app `served`, with the component schemas that the request bodies
    refer to and the one `model` this server answers to."""
    if served.openapi_schema is None:
        schema = get_openapi(title=served.title, version="1.0", routes=served.routes)
        schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions())
        for path in ("/v1/completions", "/v1/chat/completions"):
            body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
            body["properties"]["model"]["enum"] = [model_name]
        served.openapi_schema = schema
    return served.openapi_schema

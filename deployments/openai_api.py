"""The OpenAI-compatible request bodies, their validation, and the response shapes.

Unknown fields are rejected (as OpenAI does) rather than silently ignored; the parameters this
server cannot honour (n > 1, logprobs, penalties) get a 400 that says so.
"""
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class Speculation(BaseModel):
    """extension: how this request speculates (comparisons and pinned workloads); unset fields keep the server's."""
    model_config = ConfigDict(extra="forbid")
    drafter: str | None = Field(None, min_length=1, description="pin one drafter of the pool for every round")
    k: int | None = Field(None, ge=1, description="draft tokens per round (at most the server's K)")
    objective: Literal["time", "eal", "tap"] | None = Field(None, description="the learner's loss")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="extension (as in vLLM): 0 = off")
    n: Literal[1] = 1
    stream: bool = False
    stream_options: dict | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    speculate: bool = Field(True, description="extension: false decodes with the target alone (for comparisons)")
    speculation: Speculation | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else (stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes at most 4 non-empty strings")
        return stops

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class CompletionBody(_Body):
    prompt: str | list[str]
    max_tokens: int | None = Field(16, ge=1)

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


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = None


class ChatBody(_Body):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def parse(body_cls: type[_Body], payload) -> _Body:
    try:
        return body_cls.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise APIError(400, f"{param}: {first['msg']}" if param else first["msg"], param) from None


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

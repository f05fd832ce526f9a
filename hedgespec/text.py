"""From committed tokens to the text a client sees: EOS, max_tokens, stop strings, and streaming
deltas that never show a partial UTF-8 character or the beginning of a stop string."""
from transformers import PreTrainedTokenizerBase


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | list[dict], chat: bool = True) -> list[int]:
    """A chat (a list of messages, or one user message) through the model's chat template, or raw text."""
    if isinstance(prompt, str) and not chat:
        return tokenizer.encode(prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


class TextStream:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_tokens: int, stop: list[str], eos_ids: set[int]):
        assert max_tokens >= 1, "max_tokens must be >= 1"
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.stop = [s for s in stop if s]
        self.eos_ids = eos_ids
        self.tokens: list[int] = []
        self.text = ""
        self.emitted = 0  # characters of self.text already handed out as deltas
        self.finish_reason: str | None = None
        # Incremental detokenization: only the tokens from `window` on are decoded again at each push
        # (decoding all of them would cost O(n) per push, O(n^2) per request). The text of tokens up
        # to `settled` ends on a whole character and cannot change. The window starts at the tokens
        # that the settlement before the last one took in, not at `settled`: those give a tokenizer
        # the context it needs at the window's start (SentencePiece drops the leading space of the
        # first token it decodes), and their text, `window_head`, is cut off again.
        self.window = self.settled = 0
        self.settled_text = ""  # the text of tokens[:settled]
        self.window_head = ""  # the text of tokens[window:settled], decoded as the window is

    @property
    def remaining(self) -> int:
        return self.max_tokens - len(self.tokens)

    def push(self, tokens: list[int]) -> str:
        """Take one round's committed tokens; returns the text that may be shown now."""
        assert self.finish_reason is None, "the stream has finished"
        for token in tokens:
            if token in self.eos_ids:
                self.finish_reason = "stop"
                break
            self.tokens.append(token)
            if len(self.tokens) == self.max_tokens:
                self.finish_reason = "length"
                break
        self.text = self._decode_incrementally()
        self._cut_at_stop()
        return self._delta()

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _decode_incrementally(self) -> str:
        """The text of all tokens, decoding only the window's."""
        window_text = self._decode(self.tokens[self.window:])
        if not window_text.startswith(self.window_head):  # a tokenizer whose text is not decoded piecewise
            self.window = self.settled = 0
            self.settled_text = self.window_head = ""
            window_text = self._decode(self.tokens)
        text = self.settled_text + window_text[len(self.window_head):]
        if window_text and not window_text.endswith("\ufffd"):  # on a whole character: settle it
            self.window, self.settled, self.settled_text = self.settled, len(self.tokens), text
            self.window_head = self._decode(self.tokens[self.window:self.settled])
        return text

    def _cut_at_stop(self) -> None:
        # search only where a stop string could newly end: it cannot lie wholly in emitted text
        longest = max((len(s) for s in self.stop), default=0)
        begin = max(0, self.emitted - longest)
        hits = [(i, i + len(s)) for i, s in ((self.text.find(s, begin), s) for s in self.stop) if i >= 0]
        if not hits:
            return
        cut, stop_end = min(hits)
        self.text = self.text[:cut]
        self.finish_reason = "stop"
        # count only the tokens up to the one that completed the stop string
        while len(self.tokens) > 1 and len(self._decode(self.tokens[:-1])) >= stop_end:
            self.tokens.pop()

    def _delta(self) -> str:
        end = len(self.text)
        if self.finish_reason is None:
            while end > self.emitted and self.text[end - 1] == "\ufffd":  # an unfinished UTF-8 sequence
                end -= 1
            for s in self.stop:  # hold back a suffix that may grow into a stop string
                for n in range(min(len(s) - 1, end - self.emitted), 0, -1):
                    if self.text[end - n:end] == s[:n]:
                        end -= n
                        break
        delta = self.text[self.emitted:end]
        self.emitted = max(self.emitted, end)
        return delta

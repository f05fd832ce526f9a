"""The text a client sees: EOS, max_tokens, stop strings and streaming deltas."""
from hedgespec.models.tiny import byte_tokenizer
from hedgespec.text import TextStream

TOKENIZER = byte_tokenizer()
EOS = TOKENIZER.eos_token_id


def tokens(text: str) -> list[int]:
    return TOKENIZER.encode(text)


def stream_all(stream: TextStream, chunks: list[list[int]]) -> list[str]:
    deltas = []
    for chunk in chunks:
        if stream.finish_reason is not None:
            break
        deltas.append(stream.push(chunk))
    return deltas


def test_eos_ends_the_text_and_is_not_shown():
    stream = TextStream(TOKENIZER, 100, [], {EOS})
    deltas = stream_all(stream, [tokens("hello"), tokens(" world") + [EOS] + tokens("never")])
    assert "".join(deltas) == stream.text == "hello world"
    assert stream.finish_reason == "stop" and stream.tokens == tokens("hello world")


def test_max_tokens_cuts_inside_a_round():
    stream = TextStream(TOKENIZER, 7, [], {EOS})
    stream_all(stream, [tokens("abcd"), tokens("efgh")])
    assert stream.text == "abcdefg" and stream.finish_reason == "length" and stream.remaining == 0


def test_stop_string_across_rounds_is_held_back_then_cut():
    stream = TextStream(TOKENIZER, 100, ["STOP"], {EOS})
    deltas = stream_all(stream, [tokens("one ST"), tokens("OP two")])
    assert deltas[0] == "one "  # "ST" might begin the stop string: not shown yet
    assert "".join(deltas) == stream.text == "one "
    assert stream.finish_reason == "stop"
    assert stream.tokens == tokens("one STOP")


def test_held_back_prefix_is_released_when_it_does_not_become_a_stop():
    stream = TextStream(TOKENIZER, 100, ["STOP"], {EOS})
    deltas = stream_all(stream, [tokens("one ST"), tokens("ART")])
    assert deltas == ["one ", "START"]


def test_partial_utf8_is_never_streamed():
    encoded = tokens("é")  # two byte tokens
    assert len(encoded) == 2
    stream = TextStream(TOKENIZER, 100, [], {EOS})
    assert stream.push(encoded[:1]) == ""
    assert stream.push(encoded[1:]) == "é"


def test_earliest_of_several_stops_wins():
    stream = TextStream(TOKENIZER, 100, ["bb", "a"], {EOS})
    stream.push(tokens("xxbbya"))
    assert stream.text == "xx"


def test_text_decoded_piecewise_equals_the_whole_decode_at_every_push():
    """Incremental detokenization against the tokenizer's decode of every token so far (the
    reference), with multi-byte characters split across pushes of random sizes."""
    import random
    text = "naïve café — 東京 🚀 ok\n" * 4
    encoded = tokens(text)
    rng = random.Random(0)
    for _ in range(20):
        stream, at = TextStream(TOKENIZER, len(encoded), [], {EOS}), 0
        shown = ""
        while at < len(encoded):
            size = rng.randint(1, 5)
            shown += stream.push(encoded[at:at + size])
            at += size
            assert stream.text == TOKENIZER.decode(encoded[:at], skip_special_tokens=True)
            assert "\ufffd" not in shown
        assert shown == stream.text == text

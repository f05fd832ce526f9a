"""RemoteTarget.verify (deployments/adapters.py) against a Target stand-in that keeps Ray's rule for
a call whose argument is another call's answer: it runs once that answer has come, and not at all if
it is cancelled first. A draft whose drafter-group replica died as the call reached it may never
come (seen on the tiny app: a request held for the whole 60 s of TARGET_TIMEOUT_S)."""
import threading
import time
from concurrent.futures import CancelledError

from ray.serve.handle import DeploymentResponse

from deployments import adapters
from hedgespec.interfaces import Draft


class Answer(DeploymentResponse):
    """A call's answer as the ingress holds it: `.result` waits until `give` or `cancel`."""

    def __init__(self):  # no router: nothing is sent anywhere
        self.given, self.value, self.error, self.was_cancelled = threading.Event(), None, None, False

    def give(self, value=None, error=None):
        self.value, self.error = value, error
        self.given.set()

    def result(self, timeout_s=None):
        if not self.given.wait(timeout_s):
            raise TimeoutError
        if self.error is not None:
            raise self.error
        return self.value

    def cancel(self):
        self.was_cancelled = True
        if not self.given.is_set():
            self.give(error=CancelledError())


class Target:
    """`.verify.remote(key, seq, draft)`: runs `forward_s` after its draft has come (at once for a
    plain step), fails where the draft failed; notes every call and every verify it ran."""

    def __init__(self, forward_s: float = 0.0):
        self.forward_s, self.calls, self.ran = forward_s, [], []
        self.verify_hangs = False  # a drafted verify is never answered, whatever its draft's fate

    def options(self, **_):
        return self

    @property
    def verify(self):
        target = self

        class Method:
            @staticmethod
            def remote(key, seq, draft):
                answer = Answer()
                target.calls.append((seq, draft, answer))

                def run():
                    if isinstance(draft, Answer):
                        if target.verify_hangs:
                            return
                        try:
                            draft.result()
                        except Exception as error:
                            return answer.give(error=error)
                    time.sleep(target.forward_s)
                    if not answer.was_cancelled:
                        target.ran.append(seq)
                        answer.give(f"verified {seq}")
                threading.Thread(target=run, daemon=True).start()
                return answer
        return Method()


def test_a_draft_that_never_comes_gives_the_plain_step_in_its_turn(monkeypatch):
    monkeypatch.setattr(adapters, "DRAFT_TIMEOUT_S", 0.2)
    target, draft = Target(), Answer()  # the draft's replica died as the call reached it
    started = time.monotonic()
    verified = adapters.RemoteTarget(target, "request").verify("request", draft)
    assert time.monotonic() - started < 5  # not TARGET_TIMEOUT_S
    assert verified == "verified 0"
    (first_seq, first_draft, first), (plain_seq, plain_draft, _) = target.calls
    assert (first_seq, first_draft) == (0, draft) and first.was_cancelled and draft.was_cancelled
    assert (plain_seq, plain_draft) == (0, Draft([]))  # the plain step takes the turn the verify never took
    assert target.ran == [0]


def test_a_target_slower_than_the_draft_timeout_is_waited_for(monkeypatch):
    monkeypatch.setattr(adapters, "DRAFT_TIMEOUT_S", 0.2)
    target, draft = Target(forward_s=0.6), Answer()
    draft.give(Draft([1, 2, 3]))
    assert adapters.RemoteTarget(target, "request").verify("request", draft) == "verified 0"
    [(seq, sent, answer)] = target.calls
    assert sent is draft and not answer.was_cancelled and not draft.was_cancelled


def test_a_draft_that_failed_gives_the_plain_step():
    target, draft = Target(), Answer()
    draft.give(error=KeyError("request was never begun on this replica"))
    assert adapters.RemoteTarget(target, "request").verify("request", draft) == "verified 0"
    assert [(seq, sent) for seq, sent, _ in target.calls] == [(0, draft), (0, Draft([]))]


def test_a_draft_that_failed_while_its_verify_hangs_gives_the_plain_step(monkeypatch):
    """What the tiny app showed: the draft failed at the ingress (ActorUnavailableError, its replica
    dying) while the verify that had it as argument was never answered."""
    monkeypatch.setattr(adapters, "DRAFT_TIMEOUT_S", 0.2)
    target, draft = Target(), Answer()
    target.verify_hangs = True
    draft.give(error=RuntimeError("the actor is unavailable"))
    started = time.monotonic()
    assert adapters.RemoteTarget(target, "request").verify("request", draft) == "verified 0"
    assert time.monotonic() - started < 5
    (_, _, first), (plain_seq, plain_draft, _) = target.calls
    assert first.was_cancelled and (plain_seq, plain_draft) == (0, Draft([]))

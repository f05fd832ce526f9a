"""Per-request call ordering inside a replica.

The ingress fires a request's calls without waiting (a round's evaluation runs while the next
round drafts), and a replica may start them concurrently; each call carries a sequence number and
runs only after its predecessor, so a drafter sees begin, observe and propose in the order the
decode loop issued them. A call for a request that this replica never began (it restarted, or
the call went astray after its replica died) fails with KeyError once the begin would have arrived,
instead of waiting for predecessors that are gone.
"""
import asyncio
from contextlib import asynccontextmanager

TURN_TIMEOUT_S = 120.0  # a predecessor that never arrives means the ingress died: fail, don't hang
UNKNOWN_GRACE_S = 5.0  # calls are fired in order but may arrive out of it: how late a begin may be


class Sequencer:
    def __init__(self):
        self.next: dict[str, int] = {}
        self.changed = asyncio.Condition()

    @asynccontextmanager
    async def turn(self, request_id: str, seq: int):
        async with self.changed:
            if seq > 0 and request_id not in self.next:
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: request_id in self.next), UNKNOWN_GRACE_S)
                except TimeoutError:
                    raise KeyError(f"request {request_id} was never begun on this replica") from None
            await asyncio.wait_for(self.changed.wait_for(lambda: self.next.get(request_id, 0) == seq), TURN_TIMEOUT_S)
            if seq == 0 and request_id not in self.next:
                self.next[request_id] = 0  # begun: later calls wait for their turn
                self.changed.notify_all()
        try:
            yield
        finally:
            async with self.changed:
                self.next[request_id] = seq + 1
                self.changed.notify_all()

    def forget(self, request_id: str) -> None:
        self.next.pop(request_id, None)

    @property
    def active(self) -> int:
        return len(self.next)

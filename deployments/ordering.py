"""Per-request call ordering inside a replica.

The ingress fires a request's calls without waiting (a round's evaluation runs while the next
round drafts), and a replica may start them concurrently; each call carries a sequence number and
runs only after its predecessor, so a drafter sees begin, observe and propose in the order the
decode loop issued them.
"""
import asyncio
from contextlib import asynccontextmanager

TURN_TIMEOUT_S = 120.0  # a predecessor that never arrives means the ingress died: fail, don't hang


class Sequencer:
    def __init__(self):
        self.next: dict[str, int] = {}
        self.changed = asyncio.Condition()

    @asynccontextmanager
    async def turn(self, request_id: str, seq: int):
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.next.get(request_id, 0) == seq), TURN_TIMEOUT_S)
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

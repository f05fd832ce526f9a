"""A running app's /stats as the HTTP tests read it: once its requests have ended, no part of the app
holds state for any of them; and a client that leaves a stream."""
import time


def holds_no_state(stats: dict) -> bool:
    """Nothing in flight at the ingress (which also holds the callers' slots), nor in the target, the
    selector or a drafter group. On vLLM the target counts its requests and its proposer's apart."""
    target = stats["target"]
    held_by_target = any(target.values()) if isinstance(target, dict) else target
    return not (stats["in_flight"] or held_by_target or stats["selector"] or any(stats["groups"].values()))


def no_state(server, timeout: float = 30.0, headers: dict | None = None) -> dict:
    """/stats once no request holds state; fails when some still does after `timeout` seconds.
    `headers`: an app behind API keys wants one."""
    deadline = time.time() + timeout
    while not holds_no_state(stats := server.get("/stats", headers=headers).json()):
        assert time.time() < deadline, f"per-request state still held: {stats}"
        time.sleep(0.2)
    return stats


def leave_a_stream(client, body: dict, events: int, path: str = "/v1/completions") -> None:
    """Opens a streamed request, reads its first `events` text events and leaves mid-stream (the
    response closes at the end of the block: the client disconnects)."""
    with client.stream("POST", path, json=body) as response:
        texts = (line for line in response.iter_lines() if line.startswith("data: {"))
        for _ in range(events):
            next(texts)

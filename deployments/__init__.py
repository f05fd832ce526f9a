"""Ray Serve deployments: thin wrappers (placement, transport, HTTP) around the hedgespec library."""

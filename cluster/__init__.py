"""Running HedgeSpec Serve on a cluster: the Grafana dashboard as code (grafana/) and the Ray and KubeRay manifests."""

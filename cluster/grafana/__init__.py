"""The Grafana dashboard of HedgeSpec Serve, built as code (dashboard.py) and provisioned with grafana-client (provision.py)."""

"""Provisions the dashboard into a running Grafana with grafana-client (the maintained successor of
grafana-api), through Grafana's HTTP API: `hedgespec dashboards push --url URL --token TOKEN`.
grafana-client is the `grafana` extra: pip install -e '.[grafana]'."""
import niquests  # grafana-client's HTTP library: its connection errors reach the caller unwrapped
from grafana_client import GrafanaApi
from grafana_client.client import GrafanaException, GrafanaUnauthorizedError


class GrafanaError(Exception):
    """Grafana could not be reached, or refused the dashboard; the message says which and why."""


def push(url: str, token: str, dashboard: dict, folder_uid: str | None = None, timeout_s: float = 10.0) -> str:
    """Creates or overwrites the dashboard (matched by uid); returns its URL in Grafana."""
    grafana = GrafanaApi.from_url(url, credential=token, timeout=timeout_s)
    payload = {"dashboard": dashboard | {"id": None}, "overwrite": True, "message": "hedgespec dashboards push"}
    if folder_uid:
        payload["folderUid"] = folder_uid
    try:
        answer = grafana.dashboard.update_dashboard(payload)
    except GrafanaUnauthorizedError:
        raise GrafanaError(f"Grafana at {url} refused the token (401): use a service account token "
                           "with the Editor role") from None
    except GrafanaException as error:
        if error.status_code == 0:  # no HTTP answer: a timeout or a broken connection
            raise GrafanaError(f"cannot reach Grafana at {url}: {error.message}") from None
        raise GrafanaError(f"Grafana at {url} refused the dashboard ({error.status_code}): {error.message}") from None
    except niquests.exceptions.RequestException as error:
        raise GrafanaError(f"cannot reach Grafana at {url}: {error}") from None
    return url.rstrip("/") + answer.get("url", f"/d/{dashboard['uid']}")

"""Check a model endpoint before a run spends anything on it.

A rollout against a server that is down, or that does not serve the configured model name,
would otherwise end every episode on `model_error` after its retries. `check_model` asks
each endpoint of an OpenAI-compatible model for `GET <base_url>/models` and raises
`PreflightError` with one line saying what is wrong and what to change:

- nothing answers (connection refused, DNS, timeout);
- the endpoint answers with an HTTP error (401: the API key; anything else: the URL);
- the endpoint lists its models and the configured name is not among them.

An endpoint without a model list (404 on `/models`, or a body that is not a list) is
accepted: its first chat request will tell. Backends that are not remote (`scripted`,
`embedded`, `vllm_offline`) need no check here.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from rollout.backends import ModelConfig, OpenAIOptions


class PreflightError(RuntimeError):
    """A model endpoint cannot serve the run (one line: what and what to change)."""


def served_models(base_url: str, api_key: str = "", timeout_s: float = 5.0) -> list[str] | None:
    """The model ids an OpenAI-compatible endpoint lists, or None when it lists none (no
    `/models` route). Raises `PreflightError` when nothing answers or it answers an error."""
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            body: Any = json.loads(resp.read().decode("utf-8", errors="replace") or "null")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        hint = "check the API key (rollout.model.api_key_env)" if exc.code in (401, 403) else "check the base URL"
        raise PreflightError(f"the model server at {base_url} answered HTTP {exc.code} to GET /models; {hint}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PreflightError(f"no model server answers at {base_url} ({reason}); start it, or fix the base URL "
                             "(rollout.model.base_url)") from exc
    except ValueError:
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") is not None]


def check_model(cfg: ModelConfig, role: str = "rollout.model", timeout_s: float = 5.0) -> None:
    """Raise `PreflightError` unless every endpoint of a remote model answers and serves
    `cfg.name`; `role` names the config key in the message."""
    if cfg.kind != "openai":
        return
    opts = cfg.backend_options()
    assert isinstance(opts, OpenAIOptions)
    key = os.environ.get(opts.api_key_env, "EMPTY")
    for url in opts.urls():
        models = served_models(url, key, timeout_s)
        if models is not None and cfg.name not in models:
            shown = ", ".join(models[:8]) + (" …" if len(models) > 8 else "")
            raise PreflightError(f"the model server at {url} does not serve model {cfg.name!r} (it serves: "
                                 f"{shown or 'nothing'}); set {role}.name")

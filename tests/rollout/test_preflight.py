"""`rollout.preflight`: `served_models` and `check_model` against a fake OpenAI-compatible
server (`LeanServer`), a small stub that answers set statuses, and a closed port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rollout.backends import ModelConfig
from rollout.preflight import PreflightError, check_model, served_models
from tests.fakes.lean_server import LeanServer

pytestmark = pytest.mark.timeout(30)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens once the socket is closed


class _Stub(BaseHTTPRequestHandler):
    """Answers `GET /<status>/v1/models` with that status and `GET /body/v1/models` with a
    body that lists no models; records the Authorization header."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.headers.get("Authorization", ""))
        head = self.path.strip("/").split("/")[0]
        status, body = (200, b'{"data": "none"}') if head == "body" else (int(head), b"{}")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_served_models_lists_the_ids() -> None:
    with LeanServer(model="m-7b") as srv:
        assert served_models(srv.base_url) == ["m-7b"]
        assert served_models(srv.base_url + "/") == ["m-7b"]
        assert served_models(srv.base_url.removesuffix("/v1")) is None  # 404: no model list


def test_served_models_errors_name_what_to_change(stub: str) -> None:
    with pytest.raises(PreflightError, match=r"no model server answers at .*rollout\.model\.base_url"):
        served_models(_dead_url(), timeout_s=2)
    with pytest.raises(PreflightError, match=r"HTTP 401 .*check the API key"):
        served_models(f"{stub}/401/v1", api_key="sk-test")
    assert _Stub.seen[-1] == "Bearer sk-test"
    with pytest.raises(PreflightError, match=r"HTTP 500 .*check the base URL"):
        served_models(f"{stub}/500/v1")
    assert _Stub.seen[-1] == "Bearer EMPTY"
    assert served_models(f"{stub}/404/v1") is None
    assert served_models(f"{stub}/body/v1") is None  # a body without a list: accepted


def test_check_model_checks_every_endpoint(monkeypatch: pytest.MonkeyPatch, stub: str) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_KEY", "sk-env")
    with LeanServer(model="m") as a, LeanServer(model="n") as b:
        check_model(ModelConfig(kind="openai", name="m", base_urls=[a.base_url]))
        with pytest.raises(PreflightError, match=r"at .* does not serve model 'm' \(it serves: n\); set user\.name"):
            check_model(ModelConfig(kind="openai", name="m", base_urls=[a.base_url, b.base_url]), role="user")
    check_model(ModelConfig(kind="openai", name="m", base_url=f"{stub}/404/v1", api_key_env="PREFLIGHT_TEST_KEY"))
    assert _Stub.seen[-1] == "Bearer sk-env"
    check_model(ModelConfig(kind="scripted"))  # nothing remote: nothing to check

"""The self-play round without torch: the curriculum inside the round (bands, mix, quotas,
the round summary's counts per band), several worlds in one round, and the vLLM-served
frozen solver's lifecycle with a stand-in `vllm` executable (the lean fake server).

GRPO steps, the embedded models and the trained generator are replaced by fakes; the
selection, release, solver client and server launcher are the real ones."""

from __future__ import annotations

import hashlib
import json
import random
import stat
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import pipelines.self_play as psp
from data import store
from data.records import Sampling, StateRef, Task, ToolCall, UserScenario
from envs.registry import get_world
from pipelines.config import SelfPlayLoopConfig, SolverServeConfig, load_config
from rollout.generation import parse_generation
from rollout.model import ChatResponse
from rollout.vllm_server import VLLMServerConfig
from synthesis.self_play import SOLVER_SYSTEM, ScriptedGenerator, max_mix_size
from tests.paths import TESTS

pytestmark = pytest.mark.timeout(120)
FAKES = TESTS / "fakes"


# -- curriculum selection ------------------------------------------------------------------

def _task(i: int, p_hat: float | None, world: str = "airline") -> Task:
    ref = StateRef(world=world, seed=0, scale=30, state_hash="h")
    md: dict[str, Any] = {} if p_hat is None else {"p_hat": p_hat}
    return Task(world=world, method="self_play", instruction=f"question number {i} about things", user=UserScenario(),
                initial_state=ref, target_state_hash=f"t{i}", reference_solution=[ToolCall(name="calculate",
                                                                                             arguments={"x": i})],
                metadata=md).with_id()


def test_select_round_keeps_the_mix_and_reports_bands() -> None:
    # 6 easy (p̂ ≥ 0.9), 6 medium, 6 hard, and 2 without p̂ (scripted): strict mix of 20/50/30.
    tasks = [_task(i, p) for i, p in enumerate([1.0] * 6 + [0.6] * 6 + [0.3] * 6)] + [_task(90, None), _task(91, None)]
    picked, report = psp.select_round(tasks, SelfPlayLoopConfig())
    assert report["candidates_by_band"] == {"easy": 6, "medium": 6, "hard": 6}
    # 13 -> 2.6/6.5/3.9 -> (3, 6, 4); 14 would need 7 medium
    assert report["size"] == 13 and report["by_band"] == {"easy": 3, "medium": 6, "hard": 4}
    assert [t.metadata["band"] for t in picked] == ["easy"] * 3 + ["medium"] * 6 + ["hard"] * 4
    assert report["not_selected"] == 5 and all("p_hat" in t.metadata for t in picked)
    # A fixed size fills what a band lacks from the others (medium first, then hard).
    picked, report = psp.select_round(tasks, SelfPlayLoopConfig(curriculum_size=16))
    assert len(picked) == 16 and report["by_band"]["medium"] == 6 and report["by_band"]["easy"] == 4


def test_select_round_applies_per_world_quota() -> None:
    tasks = [_task(i, 0.6, "airline") for i in range(8)] + [_task(10 + i, 0.6, "retail") for i in range(2)]
    picked, report = psp.select_round(tasks, SelfPlayLoopConfig(curriculum_size=6, per_world_quota=3,
                                                                curriculum_mix=(0.0, 1.0, 0.0)))
    assert report["by_world"] == {"airline": 3, "retail": 2} and len(picked) == 5


# -- the round with fakes ------------------------------------------------------------------

ORACLE: dict[str, list[ToolCall]] = {}  # question -> gold calls, filled by the fake generator


def _skill(question: str) -> float:
    """How often the fake solver gets a question right: one of 1.0, 0.6, 0.3, 0.0 by its hash."""
    return (1.0, 0.6, 0.3, 0.0)[int(hashlib.sha256(question.encode()).hexdigest(), 16) % 4]


class FakeSolverModel:
    """The frozen solver: answers the gold call with probability `_skill(question)`."""

    name = "fake-solver"

    def __init__(self, model_dir: Path, max_batch: int = 8) -> None:
        self.model_dir = model_dir
        self.closed = False

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        q = messages[-1]["content"]
        right = random.Random(f"{q}|{sampling.seed}").random() < _skill(q)
        calls = ORACLE.get(q, []) if right else [ToolCall(name="calculate", arguments={"expression": "1"})]
        return ChatResponse(tool_calls=[ToolCall(name=c.name, arguments=dict(c.arguments)) for c in calls])

    async def aclose(self) -> None:
        self.closed = True


class FakeModelGenerator:
    """The trained generator: the scripted one, recording each question's gold calls."""

    name = "model"

    def __init__(self, model_cfg: dict[str, Any] | None = None, max_tokens: int = 0, **_: Any) -> None:
        self.model_cfg = model_cfg

    def __call__(self, specs: Any, conn: Any, rng: random.Random) -> list[str | None]:
        out = ScriptedGenerator(get_world(specs[0].world))(specs, conn, rng)
        for text in out:
            gen = parse_generation(text) if text else None
            if gen is not None and hasattr(gen, "calls"):
                ORACLE[gen.question] = list(gen.calls)
        return out


class FakeTokenizer:
    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any) -> str:
        return json.dumps({"messages": messages, "tools": [t["function"]["name"] for t in tools or []]})


class FakeTrainer:
    def __init__(self, rewards: list[float]) -> None:
        self.state = type("S", (), {"log_history": [{"reward": r, "step": i + 1} for i, r in enumerate(rewards)]})()


def fake_grpo_steps(events: list[dict[str, Any]], server_probe: Any = None) -> Any:
    def run(build_dataset: Any, reward_funcs: list[Any], cfg: Any, out_dir: Path, **_: Any) -> Any:
        ds = build_dataset(FakeTokenizer())
        phase = Path(out_dir).name
        rewards: list[float] = []
        if phase == "generator":  # score one real generation with the frozen solver, as TRL would
            world = get_world(json.loads(ds[0]["spec"])["world"])
            rng = random.Random(0)
            text = FakeModelGenerator()([psp.sample_spec(world, rng)], world.build_state(0, 30), rng)[0]
            rewards = reward_funcs[0]([text or ""], spec=[ds[0]["spec"]])
        events.append({"phase": phase, "rows": len(ds), "server_up": server_probe() if server_probe else None,
                       "prompts": [r["prompt"] for r in ds]})
        final = Path(out_dir) / "final"
        final.mkdir(parents=True, exist_ok=True)
        return FakeTrainer(rewards or [0.0]), None, ds, final, cfg.model

    return run


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    (tmp_path / "solver-ckpt").mkdir()
    monkeypatch.setattr(psp, "resolve_model", lambda m: str(tmp_path / "solver-ckpt"))
    monkeypatch.setattr(psp, "EmbeddedModel", FakeSolverModel)
    monkeypatch.setattr(psp, "ModelGenerator", FakeModelGenerator)
    monkeypatch.setattr(psp, "grpo_steps", fake_grpo_steps(events))
    return events


def test_round_selects_by_curriculum_and_reports_bands(fakes: list[dict[str, Any]], tmp_path: Path) -> None:
    cfg = load_config(None, {"self_play.n_candidates": 24, "self_play.k_filter": 10, "self_play.min_solver_tasks": 0,
                             "self_play.worlds": ["airline", "retail"], "self_play.generator_prompts": 2})
    s = psp.self_play_round(cfg, tmp_path / "out", 0, "embedded", "embedded", None)
    cur = s["curriculum"]
    assert s["counts"]["generated"] == 24 and s["counts"]["kept"] >= s["tasks"] > 0
    assert sum(cur["candidates_by_band"].values()) == s["counts"]["kept"]
    assert s["bands"] == cur["by_band"] and sum(s["bands"].values()) == s["tasks"] == cur["size"]
    n = cur["size"]
    # the strict mix: the split curriculum() makes of n, and nothing larger would keep it
    assert max_mix_size(cur["candidates_by_band"]) == n
    tasks = store.read_records(s["release"], "tasks")
    assert len(tasks) == n and Counter(t.metadata["band"] for t in tasks) == Counter(
        {b: k for b, k in cur["by_band"].items() if k})
    assert {t.world for t in tasks} <= {"airline", "retail"} and set(s["worlds"]) == {"airline", "retail"}
    manifest = store.read_manifest(s["release"])
    assert manifest.stats["curriculum"]["by_band"] == cur["by_band"]
    solver_phase = next(e for e in fakes if e["phase"] == "solver")
    assert solver_phase["rows"] == n
    summary = json.loads((tmp_path / "out" / "self_play" / "round-0" / "round_summary.json").read_text())
    assert summary["bands"] == cur["by_band"] and summary["frozen_solver"] == {"kind": "embedded"}


def test_round_tops_up_outside_the_mix(fakes: list[dict[str, Any]], tmp_path: Path) -> None:
    cfg = load_config(None, {"self_play.n_candidates": 2, "self_play.k_filter": 2, "self_play.min_solver_tasks": 5,
                             "self_play.curriculum_size": 0})
    s = psp.self_play_round(cfg, tmp_path / "out", 0, "embedded", "embedded", None)
    assert s["curriculum"]["size"] == 0 and s["scripted_top_up"] == 5 and s["tasks"] == 5
    tasks = store.read_records(s["release"], "tasks")
    assert all(t.metadata["generator"] == "scripted" and "band" not in t.metadata for t in tasks)


def test_unknown_world_in_the_round_is_a_clear_error(fakes: list[dict[str, Any]], tmp_path: Path) -> None:
    cfg = load_config(None, {"self_play.worlds": ["atlantis"]})
    with pytest.raises(KeyError, match="atlantis"):
        psp.self_play_round(cfg, tmp_path, 0, "embedded", "embedded", None)


# -- vLLM-served frozen solver (stand-in executable) -----------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stand_in(tmp_path: Path, log: Path) -> str:
    """An executable taking `vllm serve MODEL ...`: the lean fake server, logging every chat request."""
    exe = tmp_path / "vllm"
    exe.write_text(f"""#!{sys.executable}
import json, sys
sys.path.insert(0, {str(FAKES)!r})
import lean_server

_orig = lean_server.LeanServer.completion


def completion(self, request):
    with open({str(log)!r}, "a") as f:
        f.write(json.dumps(request) + "\\n")
    return _orig(self, request)


lean_server.LeanServer.completion = completion
lean_server.main()
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def test_vllm_served_solver_lifecycle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    port = _free_port()
    log = tmp_path / "requests.jsonl"
    (tmp_path / "solver-ckpt").mkdir()
    monkeypatch.setattr(psp, "resolve_model", lambda m: str(tmp_path / "solver-ckpt"))
    monkeypatch.setattr(psp, "EmbeddedModel", None)  # the CPU solver must not be built
    monkeypatch.setattr(psp, "ModelGenerator", FakeModelGenerator)
    monkeypatch.setattr(psp, "grpo_steps", fake_grpo_steps(events, lambda: _up(f"http://127.0.0.1:{port}/health")))
    serve = SolverServeConfig(server=VLLMServerConfig(model="<solver checkpoint>", served_model_name="solver",
                                                      port=port, executable=_stand_in(tmp_path, log)),
                              startup_timeout_s=60)
    cfg = load_config(None, {"self_play.n_candidates": 3, "self_play.k_filter": 2, "self_play.k_reward": 2,
                             "self_play.min_solver_tasks": 1})
    cfg.self_play.solver_server = serve
    s = psp.self_play_round(cfg, tmp_path / "out", 0, "embedded", "embedded", None)

    # up during the generator's GRPO step, down before the solver's
    assert [(e["phase"], e["server_up"]) for e in events] == [("generator", True), ("solver", False)]
    assert not _up(f"http://127.0.0.1:{port}/health")
    assert s["frozen_solver"]["kind"] == "vllm" and s["frozen_solver"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    # the checkpoint was served, and every solver request went to it
    argv = (tmp_path / "out" / "self_play" / "round-0" / "solver-vllm.log").read_text()
    assert "lean server listening" in argv
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    # generator reward: k_reward (2) answers for one generation; filter: k_filter (2) per valid candidate
    assert all(r["model"] == "solver" and r["messages"][0] == {"role": "system", "content": SOLVER_SYSTEM}
               for r in requests)
    assert all(r["tools"] for r in requests)  # the candidate's menu is offered as tools
    assert len(requests) == 2 + 2 * s["counts"]["valid"]


def test_bad_curriculum_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="curriculum_mix"):
        load_config(None, {"self_play.curriculum_mix": [0.5, -0.1, 0.6]})
    with pytest.raises(ValueError, match="curriculum_bands"):
        load_config(None, {"self_play.curriculum_bands": [0.9, 0.5]})

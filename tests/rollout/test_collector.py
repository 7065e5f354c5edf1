"""`rollout.collector`: k trials per task with many episodes in flight, seeded per trial, one
broken episode recorded as `env_error` without taking the others along, and the rollout and
user configuration checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from data.records import Sampling, Task
from rollout.agent import AgentConfig
from rollout.collector import (
    ModelConfig,
    RolloutConfig,
    UserConfig,
    collect,
    make_user,
    trial_sampling,
)
from rollout.policies import ScriptedPolicy
from rollout.user import LLMUser, ScriptedUser


def test_collect_k_trials_with_many_in_flight(tasks: list[Task]) -> None:
    cfg = RolloutConfig(model=ModelConfig(kind="scripted", noise=0.3), trials=3, concurrency=16)
    trajs = collect(tasks, cfg)
    assert len(trajs) == 3 * len(tasks)
    assert len({t.id for t in trajs}) == len(trajs)
    assert {t.trial for t in trajs} == {0, 1, 2}
    again = collect(tasks, cfg)  # seeded: a rerun repeats itself
    assert [t.model_dump() for t in again] == [t.model_dump() for t in trajs] or \
        [t.id for t in again] == [t.id for t in trajs]



def test_contract_recorded_on_every_trajectory(tasks: list[Task]) -> None:
    broken = tasks[0].model_copy(update={"world": "no-such-world"})
    cfg = RolloutConfig(model=ModelConfig(kind="scripted"), trials=1,
                        agent=AgentConfig(persistent_state=False, max_tool_calls_per_turn=2))
    trajs = collect([tasks[0], broken], cfg)
    assert [t.termination for t in trajs] == ["user_stop", "env_error"]
    for t in trajs:
        assert t.metadata["persistent_state"] is False and t.metadata["max_tool_calls_per_turn"] == 2



def test_config_validation() -> None:
    with pytest.raises(ValidationError, match="needs a model"):
        RolloutConfig(model=ModelConfig(kind="scripted"), user=UserConfig(kind="llm"))
    with pytest.raises(ValidationError, match="cannot be 'scripted'"):
        UserConfig(kind="llm", model=ModelConfig(kind="scripted"))
    with pytest.raises(ValidationError):
        UserConfig(kind="robot")  # type: ignore[arg-type]
    cfg = RolloutConfig(user=UserConfig(kind="llm"))
    assert cfg.user_model() == cfg.model


def test_trial_sampling_gives_each_trial_its_own_seed() -> None:
    base = Sampling(temperature=0.3, seed=7)
    assert [trial_sampling(base, k).seed for k in range(3)] == [7000, 7001, 7002]
    assert trial_sampling(base, 1).temperature == 0.3 and base.seed == 7  # the base is not changed
    assert trial_sampling(Sampling(seed=None), 2).seed == 2


def test_make_user_follows_the_config(tasks: list[Task]) -> None:
    scripted = RolloutConfig(model=ModelConfig(kind="scripted"))
    assert isinstance(make_user(tasks[0], scripted, 0, None), ScriptedUser)
    llm = RolloutConfig(model=ModelConfig(kind="scripted"),
                        user=UserConfig(kind="llm", model=ModelConfig(kind="openai", name="u"), max_turns=3))
    with pytest.raises(ValueError, match="no model serves the user"):
        make_user(tasks[0], llm, 0, None)
    user = make_user(tasks[0], llm, 1, ScriptedPolicy(tasks[0]))
    assert isinstance(user, LLMUser) and user.max_turns == 3 and user.retries == 1
    assert user.sampling.seed == 1 and user.sampling.temperature == 0.7  # the user's sampling, per trial

"""NL_ASSERTION (τ²-bench, methods.md §6): a language model judges natural-language assertions.

`task.verification.nl_assertions` lists statements about the conversation ("the agent refused
to cancel the basic economy booking"). The judge reads the transcript (user and agent text,
the agent's tool calls and their results) and answers, for each assertion, whether it holds.

Verifiers sit below `rollout/` in the layering, so the judge takes *any* object with an async
``chat(messages, tools, sampling)`` returning something with a ``text`` attribute
(`JudgeModel`); every `rollout.model.ChatModel` backend is one. The verdict records the
judge's model name. Score (ours) = share of assertions judged true; `passed` = all true and a
clean termination; a reply that cannot be read fails the trajectory with that reason.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field

from data.records import Sampling, Task, Trajectory, Verdict, content_hash
from envs.dialogue_acts import Act
from verifiers.base import BaseVerifier, VerifierOptions, episode_checks, register

T = TypeVar("T")

JUDGE_SYSTEM = """You grade a customer-service conversation between a user and an agent that uses
tools. For each numbered assertion, decide whether it is true of the conversation, using only
what the transcript shows. Answer with one JSON object and nothing else:
{"results": [{"id": 1, "met": true, "reason": "<one short sentence>"}, ...]}"""


class JudgeReply(Protocol):
    text: str


class JudgeModel(Protocol):
    """What the judge needs of a model: `rollout.model.ChatModel` satisfies it."""

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> JudgeReply: ...


def transcript(trajectory: Trajectory, max_chars: int = 12_000) -> str:
    """The conversation as plain text (system prompt left out), clipped at `max_chars`."""
    lines: list[str] = []
    for m in trajectory.messages:
        role = m.get("role")
        if role == "system":
            continue
        content = m.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        if role == "assistant":
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                lines.append(f"AGENT CALLS {fn.get('name')}({fn.get('arguments')})")
            if content:
                lines.append(f"AGENT: {content}")
        elif role == "tool":
            lines.append(f"TOOL RESULT ({m.get('name', '')}): {content}")
        else:
            lines.append(f"{str(role).upper()}: {content}")
    text = "\n".join(lines)
    return (
        text
        if len(text) <= max_chars
        else text[: max_chars // 2] + "\n[...]\n" + text[-max_chars // 2 :]
    )


def judge_messages(
    task: Task, trajectory: Trajectory, assertions: list[str]
) -> list[dict[str, Any]]:
    numbered = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(assertions))
    user = (
        f"The user's goal: {task.instruction}\n\nTranscript:\n{transcript(trajectory)}\n\n"
        f"Assertions:\n{numbered}"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_YES = {"true", "yes", "met", "1"}
_NO = {"false", "no", "not met", "unmet", "0"}


def parse_judgement(text: str, n: int) -> list[bool] | None:
    """Per-assertion booleans from the judge's reply (the JSON form, else ``<id>: yes|no``
    lines); None when the reply does not answer all `n` assertions."""
    for m in re.finditer(r"\{.*\}", text, re.S):
        try:
            body = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        results = body.get("results") if isinstance(body, dict) else None
        if isinstance(results, list):
            got: dict[int, bool] = {}
            for i, r in enumerate(results):
                if isinstance(r, dict) and isinstance(r.get("met"), bool):
                    rid = r.get("id", i + 1)
                    if isinstance(rid, int):
                        got[rid] = r["met"]
            if all(i in got for i in range(1, n + 1)):
                return [got[i] for i in range(1, n + 1)]
    lines: dict[int, bool] = {}
    for m in re.finditer(
        r"^\s*(\d+)[.):]\s*(true|false|yes|no|met|not met|unmet)\b", text, re.I | re.M
    ):
        word = m.group(2).lower()
        lines[int(m.group(1))] = word in _YES and word not in _NO
    if all(i in lines for i in range(1, n + 1)):
        return [lines[i] for i in range(1, n + 1)]
    return None


class _LoopThread:
    """One private event loop in a daemon thread: sync callers (and callers inside another
    running loop) submit coroutines to it, and a model's async client stays on one loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="llm-judge-loop").start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


ACT_SYSTEM = """An agent proposed a change to a customer's account and the customer replied. Decide
whether the reply is an unambiguous yes to everything proposed. Answer with exactly one word:
yes (a clear go-ahead, no condition, no doubt, not only part of it), no (the customer
declines), or unsure (a hedge, a question, a condition, a yes to only part of it)."""
_ACT_WORD = re.compile(r"\b(yes|no|unsure)\b", re.I)
_loop: _LoopThread | None = None


def judge_act(model: JudgeModel, plan: str, reply: str, sampling: Sampling | None = None) -> Act | None:
    """The judge's reading of a user's `reply` to the agent's `plan`: ``confirm``, ``decline``
    or ``unsure``; None when the judge's answer cannot be read or the call fails (the
    caller then keeps "unsure": a judge that cannot answer never makes a yes)."""
    global _loop
    messages = [{"role": "system", "content": ACT_SYSTEM},
                {"role": "user", "content": f"Agent: {plan.strip()[-2000:]}\n\nCustomer: {reply.strip()[:1000]}"}]
    if _loop is None:
        _loop = _LoopThread()
    try:
        answer = _loop.run(model.chat(messages, [], sampling or Sampling(temperature=0.0, max_tokens=8, seed=0)))
    except Exception:  # noqa: BLE001 - a judge that fails leaves the reply unsure
        return None
    m = _ACT_WORD.search(str(getattr(answer, "text", "") or ""))
    return {"yes": "confirm", "no": "decline", "unsure": "unsure"}[m.group(1).lower()] if m else None


class JudgeOptions(VerifierOptions):
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=512, seed=0))


class LLMJudgeVerifier(BaseVerifier):
    """Natural-language assertions judged by a model (`JudgeModel`)."""

    name = "llm_judge"
    version = "1.0.0"
    basis_name = "NL_ASSERTION"
    needs_model = True
    audit_kinds = frozenset()  # a judge needs a model: not audited here
    prompt_version = content_hash(JUDGE_SYSTEM, 8)

    options_model = JudgeOptions
    options: JudgeOptions

    def __init__(self, options: JudgeOptions | Mapping[str, Any] | None = None,
                 model: JudgeModel | None = None, **fields: Any) -> None:
        if model is None and options is not None and not isinstance(options, BaseModel | Mapping):
            model, options = options, None  # LLMJudgeVerifier(judge): the model first, as before
        super().__init__(options, model, **fields)
        self._loop: _LoopThread | None = None

    def applies_to(self, task: Task) -> bool:
        """Only tasks that carry natural-language assertions."""
        return bool(task.verification.nl_assertions)

    async def averify(self, task: Task, trajectory: Trajectory) -> Verdict:
        if self.model is None:
            raise RuntimeError(
                "llm_judge has no model: build it as LLMJudgeVerifier(model=...) with any object "
                "that has an async chat(messages, tools, sampling) (e.g. a rollout ChatModel)"
            )
        assertions = list(task.verification.nl_assertions)
        model_name = str(getattr(self.model, "name", type(self.model).__name__))
        base = {
            "trajectory_id": trajectory.id,
            "task_id": task.id,
            "verifier": self.name,
            "verifier_version": self.version,
        }
        details: dict[str, Any] = {
            "judge_model": model_name,
            "prompt_version": self.prompt_version,
            "assertions": assertions,
        }
        if not assertions:
            return Verdict(**base, passed=True, score=1.0, reasons=[], details=details)
        reply = await self.model.chat(
            judge_messages(task, trajectory, assertions), [], self.options.sampling
        )
        text = str(getattr(reply, "text", "") or "")
        met = parse_judgement(text, len(assertions))
        details["reply"] = text[:2000]
        if met is None:
            return Verdict(
                **base,
                passed=False,
                score=0.0,
                details=details,
                reasons=["the judge's reply could not be read as a verdict on every assertion"],
            )
        details["met"] = met
        reasons = [
            f"assertion not met: {a}" for a, ok in zip(assertions, met, strict=True) if not ok
        ]
        score, clean, episode = episode_checks(
            trajectory,
            trajectory.final_state_hash or "",
            sum(met) / len(met),
            self.options.require_clean_termination,
            task,
        )
        return Verdict(
            **base,
            passed=all(met) and (clean or not self.options.require_clean_termination),
            score=round(score, 6),
            reasons=reasons + episode,
            details=details,
        )

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop.run(self.averify(task, trajectory))

    def close(self) -> None:
        """Close the judge model on the loop its calls ran on (when the caller owns it)."""
        close = getattr(self.model, "aclose", None)
        if self._loop is not None and callable(close):
            self._loop.run(close())


register(LLMJudgeVerifier.name)(LLMJudgeVerifier)

"""Worlds as TRL environments: multi-turn GRPO where the model calls a world's tools.

TRL 1.16's `GRPOTrainer(environment_factory=...)` (experimental) takes a callable, or a
`{name: callable}` dict selected per row by an `environment` column, that returns an object
with:

- `reset(**row) -> str | None`: called once per rollout with every dataset column of the
  row (minus `environment` in the dict form); a returned string is appended to the last
  prompt message;
- public methods: the tools. TRL renders their schemas with `transformers.get_json_schema`
  (type hints + Google docstring), parses the model's tool calls with the tokenizer's
  `response_template`, calls `method(**arguments)` and appends the result as a `tool`
  message, for up to `max_tool_calling_iterations` rounds; a rollout ends when the model
  answers without a tool call or the completion budget (`max_completion_length`, tool
  results included) is spent;
- optionally `get_reward()` (not used here: the reward function below needs the completion
  to tell a clean stop from a truncated episode).

`environment_class(world)` builds one class per world whose methods are the world's tools,
with signatures and docstrings made from the `ToolSpec`s, so the rendered schemas carry the
same names, types, enums, required arguments and descriptions as `world.tool_schemas()`.
Each call runs through `Env.call` (savepoints, structured errors: a rule violation is a
tool result, never an exception).

**The user is in the loop.** TRL's loop has no user turns: a plain-text answer ends the
rollout. So every environment has one more tool, `send_message_to_user(message)`: the agent
says something to the user (asks for their id, states its plan and asks for the go-ahead,
answers a question) and the tool's result is the user's reply, from the scripted user of
the task (`rollout.user.ScriptedUser`, the same one rollouts use; another simulator may be
given with `user_factory`). The opening prompt is the user's first message as in any
rollout, with no shortcut ("you have my go-ahead") the other tasks' prompts lack. The
model's final plain-text answer is its last message to the user (the report). No trajforge
row calls that tool: `train.conversation` drives the same environments from a `rollout_func`
in which plain text goes to the user, as in the agent loop (GRPO's default channel).

**The reward is the verdict.** `verifier_reward` rebuilds the conversation (the user's
turns, the agent's messages, its tool calls and their results, the final answer) and judges
it with the composite verifier (`verifiers.composite`: the task's outcome, what the user was
told, and the policy's process): the reward is its dense score. Configured with other
verifiers (`verifiers=`), the task's primary one among them judges instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, ClassVar

from data.records import Step, Task, ToolCall, Trajectory, Verdict
from envs.registry import get_world
from rollout.agent import TRANSFER_TOOL
from rollout.control_tokens import escape_control_tokens
from rollout.user import MARKERS, ScriptedUser, UserSimulator, termination_for
from verifiers.base import applies, get_verifier, primary_verifier

DEFAULT_VERIFIERS = ("composite",)
USER_TOOL = "send_message_to_user"
EPISODE_COLUMN = "episode"  # train.conversation's rollout column: each completion's environment
RESERVED = {"reset", "get_reward", USER_TOOL}
UserFactory = Callable[[Task], UserSimulator]


def user_tool_schema() -> dict[str, Any]:
    """The schema TRL renders for `send_message_to_user` (rl rows list it with the world's tools)."""
    doc = WorldEnvironment.send_message_to_user.__doc__ or ""
    return {"type": "function", "function": {
        "name": USER_TOOL, "description": " ".join(doc.split("Args:")[0].split()),
        "parameters": {"type": "object", "properties": {"message": {
            "type": "string", "description": "What to tell or ask the user, in plain words."}}, "required": ["message"]}}}


def _run(coro: Any) -> Any:
    """Run a user simulator's coroutine from TRL's synchronous tool call (in a worker thread
    when the calling thread already runs an event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


@lru_cache(maxsize=1024)
def _task(task_json: str) -> Task:
    return Task.model_validate_json(task_json)


def as_task(value: str | dict[str, Any] | Task) -> Task:
    """A `Task` from the rl release's `task` column (JSON), a dict or a Task."""
    if isinstance(value, Task):
        return value
    if isinstance(value, dict):
        return Task.model_validate(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a row's `task` must be the JSON of a Task")
    return _task(value)


def check_row_versions(row: dict[str, Any], task: Task, check_verifier: bool = True) -> None:
    """Refuse a release row whose `world_version` (or, with `check_verifier`, its verifier's
    version) is not the installed world's or verifier's (rows without them, schema version
    1, are not checked)."""
    from envs.registry import world_version

    want = row.get("world_version")
    if want and want != (have := world_version(task.world)):
        raise ValueError(f"row of task {task.id} was made with world {task.world!r} version {want}, but the "
                         f"installed world is version {have}: install the trajforge version named in the "
                         "release's lineage (code version) to train on it")
    name, version = row.get("verifier"), row.get("verifier_version")
    if check_verifier and name and version and version != (have := get_verifier(name).version):
        raise ValueError(f"row of task {task.id} is judged by {name} {version}, but the installed {name} is "
                         f"{have}: install the trajforge version named in the release's lineage")


def check_release_versions(rows: Iterable[dict[str, Any]], verifiers: Sequence[str]) -> None:
    """`check_row_versions` on every row of a release, before training starts: a row made
    with another world (or, for a row judged by one of `verifiers`, another verifier) version
    is refused up front, not at the step that first samples it."""
    for row in rows:
        check_row_versions(row, as_task(row["task"]), check_verifier=row.get("verifier") in verifiers)


class WorldEnvironment:
    """One rollout's live copy of a task's world. Subclasses (see `environment_class`) add
    one method per tool; the tool methods route here through `_call`. TRL exposes every
    public method as a tool, so everything else here is private (`_judge`, `_trajectory`)."""

    world_name: ClassVar[str] = ""
    verifiers: ClassVar[tuple[str, ...]] = DEFAULT_VERIFIERS
    user_factory: ClassVar[UserFactory | None] = None

    def __init__(self) -> None:
        self.task: Task | None = None
        self.env: Any = None
        self.user: UserSimulator | None = None
        self.messages: list[dict[str, Any]] = []  # the conversation so far, as a rollout records it
        self.ended = False  # the user ended the conversation
        self.steps: list[Step] = []
        self.errors: Counter[str] = Counter()
        self.verdict: Verdict | None = None
        self.resets = 0
        self.row_verifier: str | None = None
        self.closing: str | None = None  # how the episode ended, when its driver decided (train.conversation)

    def reset(self, **row: Any) -> str | None:
        """Start a fresh episode of `row["task"]`: a new copy of its initial state.

        An rl release row (schema version 2) also names its world and verifier versions; a
        row made by another version of either is refused (its rewards would not mean what
        the release says). Its `verifier` then judges the episode, when it is one of the
        class's `verifiers`.
        """
        if "task" not in row:
            raise ValueError("an environment row needs a `task` column (the rl release's task JSON)")
        task = as_task(row["task"])
        if task.world != self.world_name:
            raise ValueError(f"task {task.id} is in world {task.world!r}, not {self.world_name!r}")
        check_row_versions(row, task, check_verifier=row.get("verifier") in self.verifiers)
        self._close()
        self.row_verifier = row.get("verifier") or None
        self.task = task
        self.env = get_world(task.world).env(task.initial_state)
        self.steps, self.errors, self.verdict = [], Counter(), None
        factory = type(self).user_factory
        self.user = factory(task) if factory is not None else ScriptedUser(task)
        self.messages = [{"role": "user", "content": self.user.first_message()}]
        self.ended = False
        self.closing = None
        self.resets += 1
        return None

    def send_message_to_user(self, message: str):  # type: ignore[no-untyped-def]  # no return hint: TRL would render one
        """Say something to the user (a question, a plan to confirm, an answer) and get their reply.

        Args:
            message: What to tell or ask the user, in plain words.
        """
        reply = self._hear(str(message))
        if termination_for(reply):
            for marker in MARKERS:
                reply = reply.replace(marker, "")
            reply = reply.strip() + " (The user has ended the conversation.)"
        return escape_control_tokens(reply)

    def _hear(self, message: str) -> str:
        """Record the agent's `message` to the user and the user's reply, as the agent loop
        records them (the reply as the user wrote it, an end marker included); an ended
        conversation gets a fixed notice instead of a reply."""
        if self.user is None:
            raise RuntimeError("reset() must be called before talking to the user")
        self.messages.append({"role": "assistant", "content": message})
        if self.ended:
            reply = "(The user has left the conversation.)"
        else:
            reply = str(_run(self.user.respond(list(self.messages))))
            self.ended = termination_for(reply) is not None
        self.messages.append({"role": "user", "content": reply})
        return reply

    def _execute(self, call: ToolCall) -> Any:
        """Run one tool call in the world and record its step (and error); its observation."""
        if self.env is None:
            raise RuntimeError("reset() must be called before a tool")
        obs = self.env.call(call)
        if obs.error:
            self.errors[obs.error] += 1
        self.steps.append(Step(index=len(self.steps), turn=len(self.steps) + 1, action=call,
                               observation=obs.content, error=obs.error, error_detail=obs.detail))
        return obs

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        call = ToolCall(name=name, arguments=dict(arguments))
        obs = self._execute(call)
        call_id = f"call_{len(self.steps)}"
        self.messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}]})
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": obs.content})
        return escape_control_tokens(obs.content)  # TRL renders it into the next prompt

    # Every public method is a tool to TRL, so the helpers below are private.

    def _termination(self, answer: str | None) -> str:
        """How the episode ended, as the agent loop names it: what the driver of the episode
        set in `closing` (`train.conversation`), else "transfer" once a hand-off to a human
        agent succeeded, "agent_stop" on a final answer, else "max_turns"."""
        if self.closing is not None:
            return self.closing
        if any(s.action is not None and s.action.name == TRANSFER_TOOL and s.error is None for s in self.steps):
            return "transfer"
        return "agent_stop" if answer is not None else "max_turns"

    def _calls(self) -> list[ToolCall]:
        return [s.action for s in self.steps if s.action is not None]

    def _trajectory(self, termination: str = "agent_stop", model: str = "policy",
                    answer: str | None = None) -> Trajectory:
        """The episode so far as a `Trajectory` (the verifiers' input): its conversation, with
        the model's final plain-text `answer` as its last message to the user."""
        if self.task is None:
            raise RuntimeError("no episode: reset() was never called")
        messages = list(self.messages)
        if answer:
            messages.append({"role": "assistant", "content": answer})
        return Trajectory(id=f"grpo-{self.task.id}-{self.resets}-{id(self)}", task_id=self.task.id, trial=0,
                          model=model, steps=list(self.steps), messages=messages,
                          termination=termination,  # type: ignore[arg-type]
                          error_counts=dict(self.errors),
                          final_state_hash=self.env.state_hash() if self.env is not None else None)

    def _judge(self, termination: str = "agent_stop", names: Sequence[str] | None = None,
               answer: str | None = None) -> Verdict:
        """The verdict on this episode (kept in `self.verdict`): the composite's, or the task's
        primary verifier's among those configured."""
        if self.task is None:
            raise RuntimeError("no episode: reset() was never called")
        if names is None and self.row_verifier in self.verifiers:
            names = [self.row_verifier]  # the row's own, unless the trainer configured others
        names = list(names or self.verifiers)
        verifier = get_verifier(primary_verifier(self.task, names))
        if not applies(verifier, self.task):
            raise ValueError(f"verifier {verifier.name!r} does not apply to task {self.task.id}")
        self.verdict = verifier.verify(self.task, self._trajectory(termination, answer=answer))
        return self.verdict

    def _close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self._close()


def _docstring(spec: Any) -> str:
    lines = [spec.description or spec.name]
    props = spec.parameters.get("properties", {})
    if props:
        lines += ["", "Args:"]
        for pname, prop in props.items():
            desc = " ".join(str(prop.get("description") or pname).split())
            lines.append(f"    {pname}: {desc}")
    return "\n".join(lines)


def _tool_method(spec: Any) -> Callable[..., str]:
    name = spec.name

    def method(self: WorldEnvironment, **kwargs: Any) -> str:
        return self._call(name, kwargs)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for pname, p in spec.params.items():
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=p.default,
                                        annotation=spec.hints[pname]))
    # no return annotation: transformers would add a "return" entry to the rendered schema
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method.__annotations__ = {k: spec.hints[k] for k in spec.params}
    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(spec)
    return method


_classes: dict[tuple[str, tuple[str, ...], Any], type[WorldEnvironment]] = {}
_classes_lock = threading.Lock()


def environment_class(world: str, verifiers: Sequence[str] = DEFAULT_VERIFIERS,
                      user_factory: UserFactory | None = None) -> type[WorldEnvironment]:
    """The `WorldEnvironment` subclass of `world`: one public method per tool, and
    `send_message_to_user` (its user from `user_factory`, default the scripted user)."""
    key = (world, tuple(verifiers), user_factory)
    with _classes_lock:
        if key in _classes:
            return _classes[key]
        w = get_world(world)
        tools = getattr(w, "tools", None)
        if not tools:
            raise ValueError(f"world {world!r} has no tools to train on")
        namespace: dict[str, Any] = {"world_name": world, "verifiers": tuple(verifiers),
                                     "user_factory": staticmethod(user_factory) if user_factory else None}
        for name, spec in tools.items():
            if name in RESERVED or name.startswith("_") or hasattr(WorldEnvironment, name):
                raise ValueError(f"world {world!r}: tool name {name!r} clashes with the environment API")
            namespace[name] = _tool_method(spec)
        cls = type(f"{world.title().replace('_', '')}Environment", (WorldEnvironment,), namespace)
        _classes[key] = cls
        return cls


def environment_factories(worlds: Sequence[str], verifiers: Sequence[str] = DEFAULT_VERIFIERS,
                          user_factory: UserFactory | None = None) -> dict[str, Callable[[], WorldEnvironment]]:
    """`{world: class}` for `GRPOTrainer(environment_factory=...)` (rows carry `environment`)."""
    if not worlds:
        raise ValueError("no worlds to build environments for")
    return {w: environment_class(w, verifiers, user_factory) for w in sorted(set(worlds))}


def final_answer(completion: Any) -> str | None:
    """The model's closing plain-text answer of a conversational completion (None when it
    ended mid tool loop)."""
    if isinstance(completion, str):
        return completion if "<tool_call>" not in completion else None
    if completion and completion[-1].get("role") == "assistant" and not completion[-1].get("tool_calls"):
        content = completion[-1].get("content") or ""
        return content if isinstance(content, str) else " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict))
    return None


def ended_cleanly(completion: Any) -> bool:
    """Whether a conversational completion ends with an assistant answer without tool calls
    (the model stopped), rather than mid tool loop (iterations or token budget spent)."""
    return final_answer(completion) is not None


def verifier_reward(completions: Sequence[Any], environments: Sequence[WorldEnvironment] | None = None,
                    **kwargs: Any) -> list[float]:
    """The verdict's dense score of each rollout, judged on its environment's conversation
    (the composite by default: outcome × communication × process).

    A rollout that ended mid tool loop is judged with termination `max_turns`, which the
    verifiers score 0 (τ²-bench: only clean stops count); one that handed the user to a human
    agent, with `transfer`. Logs `verifier/passed`,
    `verifier/tool_calls` (per rollout), `verifier/tool_errors` and `verifier/user_turns`
    when TRL passes `log_metric`.
    """
    if environments is None:
        environments = kwargs.get(EPISODE_COLUMN)  # train.conversation's rollout hands them over here
    if environments is None:
        raise ValueError("verifier_reward needs TRL's `environments` (GRPOTrainer(environment_factory=...)) "
                         "or the `episode` column of train.conversation.ConversationRollout")
    if len(environments) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(environments)} environments")
    rewards: list[float] = []
    passed = calls = errors = talks = 0
    for completion, env in zip(completions, environments, strict=True):
        answer = final_answer(completion) if env.closing is None else None  # a closed one holds its last words
        verdict = env._judge(env._termination(answer), answer=answer)
        rewards.append(float(verdict.score))
        passed += verdict.passed
        calls += len(env.steps)
        errors += sum(env.errors.values())
        talks += sum(1 for m in env.messages[1:] if m["role"] == "user")
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and rewards:
        n = len(rewards)
        log_metric("verifier/passed", passed / n)
        log_metric("verifier/tool_calls", calls / n)
        log_metric("verifier/tool_errors", errors / n)
        log_metric("verifier/user_turns", talks / n)
    log_extra = kwargs.get("log_extra")
    if log_extra is not None:
        log_extra("verdict", [json.dumps({"passed": e.verdict.passed, "reasons": e.verdict.reasons[:2]})
                              if e.verdict else "" for e in environments])
    return rewards


def play_reference(env: WorldEnvironment, task: Task) -> str:
    """Play `task`'s reference dialogue in `env` (already reset to it) as a model would in
    TRL's loop: the agent's words to the user through `send_message_to_user` (the env's user
    answers), its calls to the tools. Returns the final answer (the last agent message)."""
    turns = [t for t in task.dialogue if t.role == "assistant"]
    for i, t in enumerate(turns):
        for c in t.tool_calls:
            getattr(env, c.name)(**c.arguments)
        if t.content and i < len(turns) - 1:
            env.send_message_to_user(t.content)
    return turns[-1].content if turns else ""


NO_OP_ANSWER = "Thanks for reaching out! Is there anything else I can help you with?"


def reward_gap(task: Task, verifiers: Sequence[str] = DEFAULT_VERIFIERS) -> tuple[float, float]:
    """(reward of the reference conversation, reward of a no-op: no call, one friendly
    answer) for `task` in TRL's loop: a no-op must never earn the reference's reward."""
    env = environment_class(task.world, verifiers)()
    try:
        got = []
        for play in (lambda: play_reference(env, task), lambda: NO_OP_ANSWER):
            env.reset(task=task)
            answer = play()
            got.append(float(env._judge(env._termination(answer), answer=answer).score))
        return got[0], got[1]
    finally:
        env._close()


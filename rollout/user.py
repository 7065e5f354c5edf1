"""User simulators, driven by the task's user scenario; both end the conversation with the
τ²-bench markers.

`ScriptedUser` is deterministic: it states the goal, answers identity and clarification
questions from the known info and confirms what the agent proposes. `LLMUser` plays the user with a `ChatModel`
and a system prompt built from the scenario (persona, reason, goal, what the user knows and
does not know). A simulator that fails raises `UserError`; the agent loop ends the episode
with the `user_error` termination and records why.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from data.records import Sampling, Task
from envs.contract import Identity, key_noun
from envs.conversation import asks_confirmation, world_identity
from rollout.model import ChatModel, ModelError

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
MARKERS = {STOP: "user_stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}


class UserSimulator(Protocol):
    def first_message(self) -> str: ...

    async def respond(self, messages: list[dict[str, Any]]) -> str: ...


class UserError(RuntimeError):
    """The user simulator failed for good; `reason` is one of `USER_ERROR_REASONS`."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


USER_ERROR_REASONS = (
    "model_error",  # the user's model backend failed
    "context_length",  # the conversation outgrew the user's model (mid-episode: context_exhausted)
    "empty",  # no text and no marker
    "tool_call",  # the user's model tried to call a tool
    "echo",  # the user repeated the agent's message
    "invented_id",  # an identifier that is in neither the scenario nor the conversation
    "early_stop",  # a marker before the agent said anything
)


# Second person -> first person, most specific first; "you" is always a subject in goal texts.
_TO_FIRST = [("you're", "I'm"), ("you've", "I've"), ("you'd", "I'd"), ("you'll", "I'll"),
             ("you are", "I am"), ("you were", "I was"), ("yourself", "myself"), ("yours", "mine"),
             ("your", "my"), ("you", "I")]
_TO_FIRST_RE = re.compile(r"\b(" + "|".join(re.escape(a) for a, _ in _TO_FIRST) + r")\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|me|my|mine|myself)\b")


# words after which "you" is an object ("asked you to", "on you"): it becomes "me", not "I"
# ("than" is not one: "cheaper than you expected" is "than I expected")
_OBJECT_AFTER = re.compile(r"\b(to|for|on|with|from|at|by|about|of|behind|without|asked|told|gave|give|sent|"
                           r"send|let|help|helped|charged|cost|owe|owes|remind|reminded|call|called|email|emailed|"
                           r"thank|pay|paid|got|get|bother|bothers|left|leave|keep|kept)\s+$", re.IGNORECASE)


def _to_first(m: re.Match[str]) -> str:
    word = m.group(0)
    out = dict(_TO_FIRST)[word.lower()]
    if out == "I" and _OBJECT_AFTER.search(m.string, 0, m.start()):
        return "me"
    return out if out.startswith("I") or not word[0].isupper() else out.capitalize()


def first_person(text: str) -> str:
    """Turn the task's second-person goal ("Your trip moved. You want to ... your card") into
    the user's words ("My trip moved. I want to ... my card"). Only sentences that are in the
    second person change: a question to the agent ("Can you ...?") or a sentence already in
    the first person ("I'm ..., user id ...") is left as it is."""
    parts = re.split(r"(?<=[.!?])(\s+)", text)
    return "".join(p if p.isspace() or p.rstrip().endswith("?") or _FIRST_PERSON.search(p)
                   else _TO_FIRST_RE.sub(_to_first, p) for p in parts)


def termination_for(message: str) -> str | None:
    for marker, reason in MARKERS.items():
        if marker in message:
            return reason
    return None


CONFIRMATIONS = ["Yes, please go ahead.", "Yes, that's right. Please do it.", "Sounds good, go ahead.",
                 "Yes please, go ahead."]
ANSWERS = ["It's {v}.", "Sure: {v}.", "{v}."]
CLOSINGS = ["Thanks, that's all.", "Great, thank you. That's all I needed.", "Thank you, that's everything."]


DEFAULT_IDENTITY = Identity()  # a world without its own vocabulary: the account id is a user id


def key_words(key: str) -> str:
    """How a known-info key is asked for: "user_id" -> "user id", "date_of_birth" -> "date of birth"."""
    return key_noun(key)


def asks_for(text: str, key: str, identity: Identity | None = None) -> bool:
    """Whether an agent message asks for the known-info item `key`: its words ("patient id",
    "patient number"; "email address" for "email"), or the words the world's identity
    vocabulary gives it (`Identity.asked_by`: the user's account id by any of its names,
    "member id", "user id", "customer id", "account id"; default `DEFAULT_IDENTITY`)."""
    lowered = " ".join(text.lower().split())
    words = key_words(key)
    if " " in words and any(c.isdigit() for c in words.split(" ", 1)[1]):  # "order #W123": asked as "order"
        words = words.split(" ")[0]
    variants = {words, words.replace(" id", " number"), words.split(" ")[0] if words.endswith(" address") else words}
    if words == "email":
        variants |= {"email address", "e-mail"}
    variants |= (identity or DEFAULT_IDENTITY).asked_by(key)  # one account id, by any of its names
    if words == "zip code":
        variants |= {"zip", "postal code"}
    return any(v and v in lowered for v in variants)


_ANYTHING_ELSE = re.compile(r"\banything else\b", re.IGNORECASE)


class ScriptedUser:
    """A deterministic user, driven by the task's scenario. It states its goal (never an id
    or other detail the goal itself does not say), answers the agent's identity and
    clarification questions from its known info only (each item once), says yes to a plan
    it is asked to confirm (up to `max_confirmations` times), says it does not know anything
    else it is asked, and ends the conversation (``###STOP###``) when the agent stops asking
    or offers help with anything else.
    Its wording is drawn from a few realisations per act, seeded by the task and `seed`.
    What its identity questions may be called comes from the world's `Identity` (`identity`,
    else the registered world's, else `DEFAULT_IDENTITY`)."""

    def __init__(self, task: Task, max_confirmations: int = 6, seed: int = 0,
                 identity: Identity | None = None) -> None:
        self.task = task
        self._identity = identity
        self.max_confirmations = max_confirmations
        self.confirmations = 0
        self.given: set[str] = set()
        self.unknown_answers = 0
        import random

        # seeded by what the task is, not its id (which covers the dialogue this user shapes)
        self.rng = random.Random(f"{task.instruction}|{task.initial_state.state_hash}|user|{seed}")

    @property
    def identity(self) -> Identity:
        """The identity vocabulary of the task's world (read once)."""
        if self._identity is None:
            self._identity = world_identity(self.task.world) or DEFAULT_IDENTITY
        return self._identity

    def first_message(self) -> str:
        """The goal in the user's own words (known info it mentions counts as given)."""
        text = first_person(self.task.user.task_instructions or self.task.instruction)
        self.given |= {k for k, v in self.task.user.known_info.items() if str(v) and str(v) in text}
        return text

    async def respond(self, messages: list[dict[str, Any]]) -> str:
        last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
        text = (last or {}).get("content") or ""
        known = self.task.user.known_info
        questions = " ".join(q for q in re.split(r"(?<=[.!?])\s+", text) if q.rstrip().endswith("?"))
        asked = [k for k in known if k not in self.given and asks_for(questions, k, self.identity)]
        if asked:
            self.given |= set(asked)
            if len(asked) == 1:
                return self.rng.choice(ANSWERS).format(v=known[asked[0]])
            return " ".join(f"My {key_words(k)} is {known[k]}." for k in asked)
        if "?" in text and asks_confirmation(text) and self.confirmations < self.max_confirmations:
            self.confirmations += 1
            return self.rng.choice(CONFIRMATIONS)
        if "?" in text and _ANYTHING_ELSE.search(questions):
            return f"{self.rng.choice(CLOSINGS)} {STOP}"  # an offer of more help: the user is done
        if "?" in text and self.unknown_answers < 2:
            self.unknown_answers += 1
            return "Sorry, I don't know that." if self.unknown_answers > 1 else (
                "I'm not sure. What I want is this: " + first_person(self.task.user.task_instructions
                                                                      or self.task.instruction))
        return f"{self.rng.choice(CLOSINGS)} {STOP}"

    def resume(self, messages: list[dict[str, Any]]) -> None:
        """Take up a stored conversation prefix: what was given and confirmed so far."""
        replies = [m.get("content") or "" for m in messages if m["role"] == "user"]
        if replies:
            first = replies[0]
            self.given = {k for k, v in self.task.user.known_info.items() if str(v) and str(v) in first}
        self.given |= {k for k, v in self.task.user.known_info.items() if any(str(v) in r for r in replies[1:])}
        self.confirmations = sum(r in CONFIRMATIONS for r in replies[1:])
        self.unknown_answers = sum(r.startswith(("I'm not sure.", "Sorry, I don't know")) for r in replies[1:])


# -- the LLM user ----------------------------------------------------------------------------

USER_SYSTEM_TEMPLATE = """You are role-playing a customer who contacts a customer-service agent. \
You are the customer, never the agent. Stay in character for the whole conversation.

Who you are: {persona}
Why you are contacting them: {reason}

Your goal (the agent does not know it; say what you want in your own words, one part at a time):
{goal}

What you know. Give a piece only when the agent asks for it:
{known}

What you do not know. If you are asked, say you do not know; never make it up:
{unknown}
{reactions}
Rules:
- Write one short message per turn, in plain text, as the customer.
- Never invent identifiers, numbers, names or other details: use only what is written above \
or what the agent has told you.
- Never call tools and never write the agent's part.
- When your goal is done, or the agent says it cannot be done, end your message with {stop}
- If the agent transfers you to a human agent, end your message with {transfer}
- If the agent says your request is not something they handle, end your message with \
{out_of_scope}"""

AGENT_GREETING = "Hi! How can I help you today?"
RETRY_NOTE = ("Your last message was not usable ({why}). Reply again as the customer, in plain "
              "text, using only details from your instructions or from the agent.")

# Identifier-like tokens: a digit plus a letter or underscore, or five or more characters
# (dates, ids, card numbers, emails); short numbers like "2" or "1889" are not ids.
_ID_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@.#/-]*[A-Za-z0-9]")
_ROLE_PREFIX = re.compile(r"^\s*(?:customer|user|me)\s*:\s*", re.IGNORECASE)


def id_tokens(text: str) -> set[str]:
    """Identifier-like tokens of `text` (see `_ID_TOKEN`), lower-cased."""
    out = set()
    for tok in _ID_TOKEN.findall(text or ""):
        tok = tok.strip(".-/#").lower()
        if any(c.isdigit() for c in tok) and (any(c.isalpha() or c == "_" for c in tok) or len(tok) >= 5):
            out.add(tok)
    return out


def scenario_text(task: Task) -> str:
    """Every detail the user is allowed to state (goal, known and unknown info)."""
    u = task.user
    return "\n".join([task.instruction, u.task_instructions, u.reason, u.persona, *u.reactions,
                      *u.known_info.keys(), *u.known_info.values(), *u.unknown_info])


def user_system_prompt(task: Task) -> str:
    """The LLM user's system prompt, built from the task's user scenario."""
    u = task.user
    known = "\n".join(f"- {k}: {v}" for k, v in u.known_info.items()) or "- (nothing beyond your goal)"
    unknown = "\n".join(f"- {x}" for x in u.unknown_info) or "- (nothing in particular)"
    reactions = ("\nHow to react:\n" + "\n".join(f"- {x}" for x in u.reactions) + "\n") if u.reactions else ""
    return USER_SYSTEM_TEMPLATE.format(reactions=reactions,
        persona=u.persona or "a customer", reason=u.reason or "a request",
        goal=first_person(u.task_instructions or task.instruction), known=known, unknown=unknown,
        stop=STOP, transfer=TRANSFER, out_of_scope=OUT_OF_SCOPE)


def user_view(messages: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    """The conversation as the user's model sees it: roles swapped (the agent speaks as
    "user", the simulated user as "assistant"), tool calls and tool results hidden."""
    view: list[dict[str, Any]] = [{"role": "system", "content": system},
                                  {"role": "user", "content": AGENT_GREETING}]
    for m in messages:
        text = m.get("content") or ""
        if m["role"] == "user":
            view.append({"role": "assistant", "content": text})
        elif m["role"] == "assistant" and text.strip():
            view.append({"role": "user", "content": text})
    return view


class LLMUser:
    """A user simulator played by a `ChatModel`, in character, from the task's scenario.

    Its opening message and every reply come from `model.chat` (no tools offered). A reply
    that is empty, a tool call, an echo of the agent or that states an identifier found
    neither in the scenario nor in the conversation is sampled again up to `retries` times,
    then raises `UserError`, as does a `ModelError`. After `max_turns` replies the user ends
    the conversation with `###STOP###` without asking the model (recorded as the end reason
    `max_turns`). `info()` is recorded on the trajectory as `metadata["user"]`.
    """

    kind = "llm"

    def __init__(self, task: Task, model: ChatModel, sampling: Sampling | None = None,
                 max_turns: int = 10, retries: int = 1) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.task = task
        self.model = model
        self.sampling = sampling or Sampling(temperature=0.7, max_tokens=128)
        self.max_turns = max_turns
        self.retries = retries
        self.system = user_system_prompt(task)
        self._allowed = id_tokens(scenario_text(task))
        self.turns = 0  # replies after the opening
        self.calls = 0
        self.retried = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.end: str | None = None  # "marker", "max_turns" or "error"
        self.problems: list[str] = []

    def first_message(self) -> str:
        """A deterministic opening (the goal, no known info) for callers that cannot await;
        the agent loop awaits `opening()` instead."""
        return first_person(self.task.user.task_instructions or self.task.instruction)

    async def opening(self) -> str:
        """The user's first message, from the model."""
        reply = await self._ask([], opening=True)
        if termination_for(reply):
            self.end = "error"
            raise UserError(f"the user ended the conversation before the agent spoke: {reply[:200]!r}",
                            "early_stop")
        return reply

    async def respond(self, messages: list[dict[str, Any]]) -> str:
        if self.turns >= self.max_turns:
            self.end = "max_turns"
            return STOP
        self.turns += 1
        reply = await self._ask(messages)
        if termination_for(reply):
            self.end = "marker"
        return reply

    def resume(self, messages: list[dict[str, Any]]) -> None:
        """Take up a stored conversation prefix (for branching): count the replies so far."""
        self.turns = max(0, sum(m["role"] == "user" for m in messages) - 1)
        self.end = None

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model.name, "turns": self.turns, "calls": self.calls,
                "retries": self.retried, "end": self.end, "problems": self.problems[-5:],
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}

    async def _ask(self, messages: list[dict[str, Any]], opening: bool = False) -> str:
        view = user_view(messages, self.system)
        seen = " ".join(m.get("content") or "" for m in messages if m["role"] in ("user", "assistant"))
        allowed = self._allowed | id_tokens(seen)  # tool results are not shown to the user
        last_agent = next((m.get("content") or "" for m in reversed(messages)
                           if m["role"] == "assistant" and (m.get("content") or "").strip()),
                          AGENT_GREETING)
        why = ""
        for attempt in range(self.retries + 1):
            request = view if not why else [*view, {"role": "system", "content": RETRY_NOTE.format(why=why)}]
            sampling = self.sampling
            if attempt and sampling.seed is not None:
                sampling = sampling.model_copy(update={"seed": sampling.seed + 7919 * attempt})
            try:
                resp = await self.model.chat(request, [], sampling)
            except ModelError as exc:
                self.end = "error"
                reason = "context_length" if exc.reason == "context_length" else "model_error"
                raise UserError(f"the user's model failed: {exc}", reason) from exc
            except Exception as exc:  # a backend bug ends the episode, recorded, like the agent's
                self.end = "error"
                raise UserError(f"the user's model failed: {type(exc).__name__}: {exc}", "model_error") from exc
            self.calls += 1
            self.prompt_tokens += resp.prompt_tokens
            self.completion_tokens += resp.completion_tokens
            reason, text = _check_reply(resp.text, bool(resp.tool_calls or resp.malformed), last_agent, allowed)
            if reason is None:
                return text
            why = text
            self.problems.append(reason)
            if attempt < self.retries:
                self.retried += 1
                continue
            self.end = "error"
            raise UserError(f"the user's reply was not usable ({why})", reason)
        raise AssertionError("unreachable")


def _check_reply(raw: str, called_tools: bool, last_agent: str, allowed: set[str]) -> tuple[str | None, str]:
    """(None, cleaned reply) or (error reason, why)."""
    text = _ROLE_PREFIX.sub("", (raw or "").strip()).strip()
    marker = termination_for(text)
    body = text
    for m in MARKERS:
        body = body.replace(m, "")
    body = body.strip()
    if called_tools:
        return "tool_call", "it called a tool instead of writing a message"
    if not body and not marker:
        return "empty", "it was empty"
    if body and _norm(body) == _norm(last_agent):
        return "echo", "it repeated the agent's message"
    invented = sorted(id_tokens(body) - allowed)
    if invented:
        return "invented_id", f"it states {', '.join(invented[:3])}, which you were never given"
    return None, text


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()

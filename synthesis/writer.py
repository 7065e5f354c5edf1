"""Scenario text written by a model (issue 16 §2: "with a model configured, the scenario
writer and paraphrase rewrite the text, and the rewrite is checked").

The template path (`synthesis.scenario`) gives every tool-use task a persona, a reason and a
request. With `synthesis.writer` set, a model rewrites each task's instructions in that
persona's voice, reason included, as τ²-bench's scenarios read. A rewrite is kept only when
`synthesis.paraphrase.check_paraphrase` accepts it (every value the user knows and every
name, code, date, time and amount kept; no new id-like token; no tool named; sane length; no
markup) and it states no world-internal id (`synthesis.base.internal_id_leaks`); otherwise
the template stays. The outcome is counted (`writer:accepted`, `writer_rejected:<reason>`)
and kept on the task (`metadata["writer"]`, the template in `metadata["instruction_template"]`).

A kept rewrite replaces the instruction, the user's `task_instructions` and the reference
dialogue's first user turn (the scripted user's opening of the new text), and the task gets
its new content id. The reference dialogue after the opening is unchanged: the rewrite keeps
every known value the template stated, so the scripted user gives the same answers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from data.records import Task
from synthesis.config import WriterConfig
from synthesis.texts import internal_id_leaks, with_text

SYSTEM = (
    "You write the instructions for a person who will play a customer contacting support. "
    "Rewrite the instructions you are given as one short paragraph addressed to that person "
    "(\"You ...\"), in the voice of this customer: {persona} Keep why they are calling. Keep "
    "every name, id, code, date, time and amount exactly as written. Do not add ids, facts, "
    "steps or explanations. Answer with the rewritten instructions only."
)


def writer_messages(task: Task) -> list[dict[str, str]]:
    persona = task.user.persona.strip() or "a customer."
    return [{"role": "system", "content": SYSTEM.format(persona=persona)},
            {"role": "user", "content": task.instruction}]


def write_tasks(tasks: list[Task], world: Any, cfg: WriterConfig, seed: int = 0) -> tuple[list[Task], Counter]:
    """`tasks` with model-written instructions where the checks accept them, and the counts.
    Tasks without a user scenario to speak (no reference dialogue) are left as they are."""
    from synthesis.paraphrase import check_paraphrase, generate

    todo = [i for i, t in enumerate(tasks) if t.dialogue]
    texts = generate(cfg.model, [writer_messages(tasks[i]) for i in todo],
                     [max(96, len(tasks[i].instruction) // 2) for i in todo], seed, cfg.temperature,
                     cfg.concurrency)
    names = list(getattr(world, "tools", {}))
    out = list(tasks)
    counts: Counter = Counter()
    for i, text in zip(todo, texts, strict=True):
        task = tasks[i]
        ok, reason = check_paraphrase(task.instruction, task.user.known_info, text, names)
        if ok is None:
            counts[f"writer_rejected:{reason}"] += 1
            continue
        new = with_text(task, ok, "accepted")
        if internal_id_leaks(world, new):
            counts["writer_rejected:internal_id"] += 1
            continue
        counts["writer:accepted"] += 1
        out[i] = new
    return out, counts

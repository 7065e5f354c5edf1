"""Self-play task generation (Tool-R0, methods.md §3): a generator proposes a question, a
tool menu and gold calls per sampled spec; a filter, dedup and curriculum pick the tasks at
the solver's competence frontier. One module per reason to change:

- `prompts`: sampled specs and the generator's prompt;
- `generators`: the scripted generator (templates over database records) and the model one;
- `solver`: the frozen solver as a `Solve` function (`chat_solver`);
- `selection`: the agreement filter, dedup and curriculum;
- `world_check`: a generation's gold calls run on its world;
- `coherence`: a valid generation as a conversation one user can have (their records,
  identity and words, a reference dialogue that tells them the answer), and the figures;
- `method`: the registered method `self_play` (→ validated `Task`s).

The records live in `data.self_play`, the parsing of a generator's output and its validity
in `rollout.generation`, the generator's and the solver's GRPO rewards in `train.rewards`.
"""

from synthesis.self_play.coherence import as_conversation, figures, gold_calls, solver_question
from synthesis.self_play.generators import (
    Generator,
    ModelGenerator,
    ScriptedGenerator,
    generic_template,
    response_text,
)
from synthesis.self_play.method import METHOD, SelfPlayOptions, synthesize, synthesize_with
from synthesis.self_play.prompts import (
    GENERATOR_SYSTEM,
    generator_prompt,
    sample_spec,
    world_context,
)
from synthesis.self_play.selection import (
    DEFAULT_BANDS,
    FilterResult,
    char_ngrams,
    cluster,
    curriculum,
    dedup,
    difficulty_band,
    filter_candidates,
    jaccard,
    max_mix_size,
)
from synthesis.self_play.solver import SOLVER_SYSTEM, chat_solver
from synthesis.self_play.world_check import WorldCheck, validate_on_world

__all__ = [
    "DEFAULT_BANDS", "GENERATOR_SYSTEM", "METHOD", "SOLVER_SYSTEM", "FilterResult", "Generator", "ModelGenerator",
    "ScriptedGenerator", "SelfPlayOptions", "WorldCheck", "as_conversation", "char_ngrams", "chat_solver", "cluster",
    "curriculum", "dedup", "difficulty_band", "figures", "filter_candidates", "generator_prompt", "generic_template",
    "gold_calls", "jaccard", "max_mix_size", "response_text", "sample_spec", "solver_question", "synthesize",
    "synthesize_with", "validate_on_world", "world_context",
]

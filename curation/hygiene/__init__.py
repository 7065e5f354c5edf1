"""Release hygiene: deduplication, decontamination and secret/PII scrubbing (pure functions).

One module per concern: `items` (what hygiene compares), `dedup`, `decontamination`,
`scrubbing`, `replay` (re-judging scrubbed rows) and `clean` (all of them in release order);
every name is re-exported here.

Everything here takes rows (released `sft`/`rl` rows, or any dict with `instruction` and
`tool_calls`), records (`Task`, `Trajectory`) or plain strings, and returns new rows plus a
typed report for the dataset card. Nothing reads or writes files.

- **Exact dedup**: content hash of the normalized instruction (NFKC, lower case, collapsed
  whitespace) plus the tool-call sequence (names and canonical JSON arguments).
- **Near dedup** (ours): MinHash LSH (`datasketch`) over character 5-gram shingles of
  instruction + tool sequence, counted with multiplicity (a shingle's k-th occurrence is its
  own element, so a text that repeats another twice is not its duplicate); LSH candidates are
  confirmed with the Jaccard estimated from their MinHash signatures (128 values: within
  about 0.03 near the threshold), so only signatures, never texts, are held; default
  threshold 0.85. Checked within the release and
  against earlier releases' texts; the first occurrence is kept.
- **Decontamination**: against registered evaluation sets (`register_eval_set`), word 8-gram
  and 13-gram overlap, each on instructions (every user turn) and on tool-call sequences,
  with the longest matching token span reported. Rows with an n-gram hit for `drop_n`
  (default 13) are removed.
- **Scrubbing**: API keys (``sk-...``), AWS access and secret keys, GitHub, Slack and Hugging
  Face tokens, JWTs, PEM private-key blocks, e-mail addresses and phone numbers become typed
  placeholders in every string of every column; strings that hold JSON are decoded, scrubbed
  and re-encoded so they stay valid JSON. Values the world generated are synthetic and kept:
  those in the task's initial state, its patches, the policy and tool schemas
  (`Synthetic`, from `World.synthetic_values`), and e-mails and phone numbers that first come
  out of a tool result (minted by the world). Each other value gets one placeholder in the
  whole row (``[REDACTED_EMAIL]``, a second one ``[REDACTED_EMAIL_2]``): messages, tool
  arguments, observations and the task JSON, whose ids, hashes and initial-state recipe are
  never rewritten (`SKIP_KEYS`). `Scrubber` decides each value once, then rewrites every
  occurrence, also where no pattern matches it (a secret without its label). A placeholder is
  never released in a tool call's arguments: a row whose scrubbing would change any call's
  arguments (`call_arguments`) is dropped from the release and counted
  (`ScrubReport.dropped_call_arguments`), since it would teach a call that cannot work.
- **Re-judging**: a row that scrubbing changed is judged again on the scrubbed text (a
  `Replay` the pipeline supplies: the row's verifier) and dropped, counted, if it fails.
"""

from __future__ import annotations

from curation.hygiene.clean import HygieneReport, clean_release
from curation.hygiene.decontamination import (
    EVAL_SETS,
    ContaminationReport,
    Decontaminator,
    EvalSet,
    EvalSetReport,
    decontaminate,
    get_eval_set,
    register_eval_set,
    tokens,
)
from curation.hygiene.dedup import (
    BandIndex,
    Deduper,
    DedupReport,
    dedup,
    exact_key,
    jaccard,
    shingles,
)
from curation.hygiene.items import Item, Row, item_of, normalize
from curation.hygiene.replay import Replay, ReplayReport, replay_scrubbed
from curation.hygiene.scrubbing import (
    PII_KINDS,
    SECRET_PATTERNS,
    SKIP_KEYS,
    WORLD_KEYS,
    Match,
    Scrubber,
    ScrubReport,
    Synthetic,
    SyntheticOf,
    call_arguments,
    find_matches,
    norm_value,
    placeholder,
    scrub_all,
    scrub_record,
    scrub_row,
    scrub_rows,
    scrub_text,
)

__all__ = ["BandIndex", "ContaminationReport", "Decontaminator", "DedupReport", "Deduper", "EVAL_SETS", "EvalSet", "EvalSetReport", "HygieneReport", "Item", "Match", "PII_KINDS", "Replay", "ReplayReport", "Row", "SECRET_PATTERNS", "SKIP_KEYS", "ScrubReport", "Scrubber", "Synthetic", "SyntheticOf", "WORLD_KEYS", "call_arguments", "clean_release", "decontaminate", "dedup", "exact_key", "find_matches", "get_eval_set", "item_of", "jaccard", "norm_value", "normalize", "placeholder", "register_eval_set", "replay_scrubbed", "scrub_all", "scrub_record", "scrub_row", "scrub_rows", "scrub_text", "shingles", "tokens"]

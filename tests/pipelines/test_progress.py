"""Stage progress bars (`pipelines.progress`): silent until enabled, then one bar per stage
that shard completions advance and `finish` fills; `disable` stops and forgets them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipelines import progress


@pytest.fixture(autouse=True)
def disabled() -> Iterator[None]:
    progress.disable()
    yield
    progress.disable()


def test_nothing_is_tracked_until_enabled() -> None:
    progress.start("rollout", 3)
    progress.advance("rollout")
    progress.finish("rollout")
    assert progress._progress is None and progress._tasks == {}


def test_a_bar_per_stage_advanced_by_shards_and_filled_at_the_end() -> None:
    progress.enable()
    bars = progress._progress
    assert bars is not None
    progress.enable()  # a second call keeps the same bars
    assert progress._progress is bars
    progress.start("rollout", 4)
    progress.start("verify", 4)
    progress.advance("rollout", 2)
    progress.advance("rollout")
    progress.advance("curate")  # a stage never started: ignored
    by_name = {t.description: t for t in bars.tasks}
    assert by_name["rollout"].completed == 3 and by_name["verify"].completed == 0
    progress.finish("rollout")
    assert by_name["rollout"].completed == 4 and set(progress._tasks) == {"verify"}
    progress.disable()
    assert progress._progress is None and progress._tasks == {}

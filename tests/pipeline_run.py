"""A scripted run up to its curated datasets through the plain stages (no Prefect), for
tests that need real curated or released rows: `pipelines.stages.curated_run`."""

from pipelines.stages import curated_run

__all__ = ["curated_run"]

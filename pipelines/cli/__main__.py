"""`python -m pipelines.cli`: the `trajforge` command line (`pipelines.cli.main`)."""

from __future__ import annotations

from pipelines.cli import main

if __name__ == "__main__":
    main()

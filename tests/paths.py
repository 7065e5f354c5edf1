"""Where the tests' support files are, whatever folder a test lives in."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: fakes/, fixtures/, the shared helpers
ROOT = TESTS.parent  # the repository

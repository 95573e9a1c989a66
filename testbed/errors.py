"""Exception classes; each maps to a CLI exit code."""

from __future__ import annotations


class TestbedError(Exception):
    """Base class for errors the CLI reports without a traceback (exit 1)."""

    exit_code = 1


class DefinitionError(TestbedError):
    """An experiment definition or override is invalid (exit 2, nothing created).

    The message names the key, the offending value and what is accepted.
    """

    exit_code = 2

    def __init__(self, key: str, value: object, accepted: str, source: str = "") -> None:
        self.key, self.value, self.accepted, self.source = key, value, accepted, source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}invalid value for '{key}': {value!r}; accepted: {accepted}")


class UsageError(TestbedError):
    """Bad command-line use (exit 2)."""

    exit_code = 2


class FeatureError(TestbedError):
    """The kernel lacks a feature the experiment needs and no guest can supply it."""


class GuestError(TestbedError):
    """The full-kernel guest could not boot or run the command."""


class CommandError(TestbedError):
    """An external command failed; carries the argument list and its stderr."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv, self.returncode, self.stderr = argv, returncode, stderr
        super().__init__(f"command failed (exit {returncode}): {' '.join(argv)}\n{stderr.strip()}")


class LedgerError(TestbedError):
    """A ledger could not be written, or an object it would record already exists."""


class ResultsError(TestbedError):
    """A results folder is unusable (e.g. resuming with a different configuration)."""

"""Errors a user can act on: each says what was wrong, where, and how to fix it."""


class PrenetError(Exception):
    """Base class of every error prenet raises on purpose (the CLI prints these without a traceback)."""


class UnknownHardwareError(PrenetError, KeyError):
    """A hardware name matched no catalog entry."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConfigError(PrenetError, ValueError):
    """A configuration value that cannot be what it says (an unknown key, a wrong type)."""


class HoldoutLeakError(PrenetError):
    """Rows of the frozen holdout reached a stage that must never see them."""


class DataValidationError(PrenetError):
    """A table failed its pandera schema."""


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (a library's error may append hints or a traceback-like report on further lines:
    polars' CSV reader, torch's unpickler), or its type's name when it has none: what a one-line error quotes."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

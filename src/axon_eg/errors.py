"""The exceptions users see. Every message names the culprit: the op, the shapes, the file or the line."""

from __future__ import annotations


class AxonError(Exception):
    """Base class of every error axon_eg raises on purpose."""


class ShapeError(AxonError, ValueError):
    """Shapes that do not fit an op (broadcasting, contraction, axes out of range, reshape sizes)."""


class DtypeError(AxonError, TypeError):
    """A dtype an op does not accept."""


class InvalidAttribute(AxonError, ValueError):
    """An op attribute that is missing, unknown or of the wrong type or range."""


class UnknownOperation(AxonError, KeyError):
    """An op name that is not in the registry."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedOperation(AxonError):
    """A source construct (e.g. an aten op) that has no registry equivalent.

    ``op`` names the construct, ``location`` the user's source line where it came from (if known).
    """

    def __init__(self, message: str, *, op: str | None = None, location: str | None = None):
        super().__init__(message)
        self.op = op
        self.location = location


class ProgramError(AxonError, ValueError):
    """A malformed Program: bad JSON, dangling node references, unbound dims, wrong inputs."""


class ProblemLoadError(AxonError):
    """A KernelBench-style problem file that cannot be loaded (names the file and what is missing)."""


class KernelCallError(AxonError, ValueError):
    """A call of a built kernel (``result.best``) whose arguments do not fit what it was built for: the
    count, a shape, a dtype, the device or the layout. Names the argument, what was expected and given."""


class UnknownName(AxonError, AttributeError):
    """``ax.NAME`` for a name axon_eg does not define (an op, a dtype); the message says what was meant.

    An AttributeError too, so that ``hasattr(ax, name)`` and ``getattr(ax, name, default)`` keep working."""


class InvalidArgument(AxonError, ValueError):
    """An argument of the API or an option of the CLI out of range or of the wrong type (``k=0``,
    ``budget_s=-1``): the message names the argument, what it must be and what was given."""


class PathError(InvalidArgument):
    """A path argument that cannot be used: missing, a directory where a file is wanted (or the reverse),
    unreadable, or a directory that cannot be written. Names the argument and the path."""

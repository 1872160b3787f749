"""The one error an adapter raises when its framework is not installed."""

from __future__ import annotations


def missing_extra(extra: str, package: str, cause: ImportError) -> ImportError:
    """An ImportError telling the user which ctxstack extra brings ``package``.

    Raise it ``from`` the original import failure so the underlying reason stays visible.
    """
    error = ImportError(
        f"ctxstack.integrations.{extra.replace('-', '_')} needs {package}, which is not "
        f"installed: pip install 'ctxstack[{extra}]' ({cause})"
    )
    error.name = package
    return error

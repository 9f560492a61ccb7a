"""The releases of the third-party packages egopool drives, checked before they are imported.

A release outside the range (rerun-sdk 0.28 changed ``Transform3D.columns``; an export with it
ended in a ``TypeError`` traceback) is refused in one line naming the installed release, the
range and the pip command, before the package is imported (another release may not even import
cleanly). The ``interop`` extra of pyproject.toml names the same ranges (``requirement``), and
CI tests both ends (.ci/run, docs/decisions.md I10).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import EgopoolError, install_hint

__all__ = ["ARIA", "RERUN", "Releases", "release_numbers"]


def release_numbers(version: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a release string (``"0.41.0"``, ``"0.27.0a1+dev"``, ``"1.7"``), or None."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3] or 0))


@dataclass(frozen=True)
class Releases:
    """Releases ``oldest`` (``"1.7.1"``) to every patch release of ``newest`` (``"2.3"``) of ``dist``.

    Attributes
    ----------
    dist:
        The distribution's name on PyPI (``"rerun-sdk"``).
    oldest, newest:
        The oldest release, and the newest minor release, egopool is tested with.
    use:
        What egopool does with it, for the message (``"writes Rerun recordings"``).
    """

    dist: str
    oldest: str
    newest: str
    use: str

    @property
    def requirement(self) -> str:
        """The range as a pip requirement: ``rerun-sdk>=0.26,<0.42``."""
        major, minor = (int(p) for p in self.newest.split("."))
        return f"{self.dist}>={self.oldest},<{major}.{minor + 1}"

    def problem(self, version: str) -> str | None:
        """Why egopool cannot use release ``version`` (``"0.42.0"``), or None when it can."""
        got = release_numbers(version)
        oldest, newest = release_numbers(self.oldest), release_numbers(self.newest)
        if got is not None and oldest is not None and newest is not None and oldest <= got and got[:2] <= newest[:2]:
            return None
        return (f"{self.dist} {version} is installed; egopool {self.use} with {self.dist} {self.oldest} to "
                f"{self.newest} only")

    def require(self) -> None:
        """Check the installed release (its pip record, without importing it).

        Raises
        ------
        EgopoolError
            ``dist`` is not installed (hint: the ``interop`` extra), or a release outside the
            range is (hint: the pip command installing one inside it).
        """
        from importlib.metadata import PackageNotFoundError, version

        try:
            problem = self.problem(version(self.dist))
        except PackageNotFoundError:
            raise EgopoolError(f"egopool {self.use} with {self.dist}, which is not installed",
                               hint=install_hint("interop")) from None
        if problem is not None:
            raise EgopoolError(problem, hint=f"pip install '{self.requirement}'")


#: ``egopool export rerun`` / ``view`` (egopool.interop.rerun).
RERUN = Releases("rerun-sdk", "0.26", "0.41", "writes Rerun recordings")
#: ``egopool import aria`` (egopool.interop.aria): 1.7.1, 2.1.4 and 2.3.0 read the bundled VRS and MPS
#: files identically (docs/decisions.md I10).
ARIA = Releases("projectaria-tools", "1.7.1", "2.3", "reads Project Aria recordings")

"""Findings and the report a validation run returns (file_format.md §12, multi_device_storage.md §8).

A :class:`Finding` is one problem: the spec section it breaks (``rule``), how bad
it is (``severity``), the file at fault (``path``) and a one-line ``message`` that
names the column or file and says what to do. A :class:`Report` collects them;
it is ``ok`` when no finding is an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ErrorPath

__all__ = ["ERROR", "SEVERITIES", "WARNING", "Finding", "Report"]

ERROR = "error"
WARNING = "warning"
SEVERITIES = (ERROR, WARNING)


@dataclass(frozen=True)
class Finding:
    """One problem found in a task.

    Attributes
    ----------
    rule:
        The spec section broken, e.g. ``"file_format.md §7.1"`` or
        ``"multi_device_storage.md §8.1.3"`` (``§8.1.3`` = item 3 of the §8.1 list).
    severity:
        ``"error"`` (the task breaks the contract) or ``"warning"`` (legacy or
        suspicious, readers cope).
    path:
        The file or directory at fault (task path joined with the relative path).
    message:
        One line naming the offending column or file and what to do about it.
    """

    rule: str
    severity: str
    path: str
    message: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if "\n" in self.message:
            object.__setattr__(self, "message", " ".join(self.message.split()))

    def to_dict(self) -> dict[str, str]:
        """``{"rule", "severity", "path", "message"}``."""
        return {"rule": self.rule, "severity": self.severity, "path": self.path, "message": self.message}

    def one_line(self) -> str:
        """``ERROR   file_format.md §7.1  <path>: <message>`` for people."""
        return f"{self.severity.upper():<7} {self.rule}  {self.path}: {self.message}"


@dataclass
class Report:
    """Every finding of one validation run.

    Attributes
    ----------
    task:
        The task directory as given.
    findings:
        In the order found: task-level first, then episodes by ascending N.
    episodes:
        Number of episode file groups checked.
    notes:
        One-line remarks that are not findings (a task without recorded checksums, docs/decisions.md X5).
    """

    task: str = ""
    findings: list[Finding] = field(default_factory=list)
    episodes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no finding has severity ``"error"``."""
        return not any(f.severity == ERROR for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        """Findings with severity ``"error"``."""
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        """Findings with severity ``"warning"``."""
        return [f for f in self.findings if f.severity == WARNING]

    def add(self, rule: str, severity: str, path: ErrorPath, message: str) -> Finding:
        """Append one finding and return it."""
        f = Finding(rule, severity, str(path), message)
        self.findings.append(f)
        return f

    def error(self, rule: str, path: ErrorPath, message: str) -> Finding:
        """Append an error finding."""
        return self.add(rule, ERROR, path, message)

    def warning(self, rule: str, path: ErrorPath, message: str) -> Finding:
        """Append a warning finding."""
        return self.add(rule, WARNING, path, message)

    def extend(self, findings: Iterable[Finding]) -> None:
        """Append findings of another run."""
        self.findings.extend(findings)

    def to_dict(self) -> dict[str, Any]:
        """``{"ok": bool, "findings": [{"rule", "severity", "path", "message"}, ...], "notes": [str, ...]}``."""
        return {"ok": self.ok, "findings": [f.to_dict() for f in self.findings], "notes": list(self.notes)}

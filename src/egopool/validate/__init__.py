"""The validator: check a task directory against the spec (file_format.md §12, multi_device_storage.md §8).

::

    from egopool.validate import validate_task
    report = validate_task("data/recordings/pick_cup")
    report.ok                      # True when no finding is an error
    for f in report.findings:      # Finding(rule, severity, path, message)
        print(f.rule, f.severity, f.path, f.message)
    report.to_dict()               # {"ok": bool, "findings": [{"rule", "severity", "path", "message"}, ...]}

The validator is read-only and never raises for a broken task: every problem
becomes a :class:`Finding` citing the spec section it breaks.
"""

from __future__ import annotations

from .report import Finding, Report
from .run import validate_task

__all__ = ["Finding", "Report", "validate_task"]

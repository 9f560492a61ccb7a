"""Whether an upload's declarations fit the server task (file_format.md §3, multi_device_storage §6.7;
docs/decisions.md U3, U15): one fps, features and stream slots the task can take, task meta that merges,
and nothing newly declared by a token that may not declare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import FormatError, SchemaError, UploadRejectedError
from ..meta.info import merge_info
from ..meta.stats import StatsBlock
from ..write.checks import check_feature_declarations, check_stream_declarations, check_task_meta_mergeable

__all__ = ["SERVER_OWNED", "added_declarations", "check_upload_fits", "may_not_declare"]

#: info.json keys the server task owns: never taken from an upload's snapshot.
SERVER_OWNED = ("format", "chunks_size", "data_path", "video_path", "episodes_path", "task_name", "total_episodes",
                "fps", "created_at")


def added_declarations(server_info: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
    """What an upload's ``info.json`` declares that the server task does not yet (docs/decisions.md U15): its
    new columns (``features``) and stream slots (``video_extensions``), each named."""
    def keys(doc: Mapping[str, Any], name: str) -> set[str]:
        v = doc.get(name)
        return set(v) if isinstance(v, dict) else set()

    old_streams = keys(server_info, "video_extensions") | keys(server_info, "cameras")
    return [f"column {k!r}" for k in sorted(keys(info, "features") - keys(server_info, "features"))] + \
        [f"stream {k!r}" for k in sorted(keys(info, "video_extensions") - old_streams)]


def check_upload_fits(task: str, task_dir: Path, server_info: Mapping[str, Any], info: Mapping[str, Any],
                      fresh: Mapping[str, Any] | None, blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]],
                      may_declare: bool) -> tuple[dict[str, Any], dict[str, StatsBlock]]:
    """Whether an upload's declarations fit the server task (§3, multi_device_storage §6.7), for the directory
    and the bucket importer alike: one fps, features and stream slots the task can take, task meta that
    merges, and nothing newly declared by a token that may not declare (docs/decisions.md U15). ``fresh``:
    the new task's info when the upload creates it.

    Returns
    -------
    tuple
        The upload's declarations to merge (``info.json`` without the server-owned keys) and its stats
        blocks (``blocks_for`` of the merged info).

    Raises
    ------
    UploadRejectedError
        409 ``declaration_conflict`` / ``server_task_broken``, 403 ``may_not_declare``.
    """
    if fresh is None and not _same_fps(server_info.get("fps"), info.get("fps")):
        raise UploadRejectedError(409, "declaration_conflict", f"the server task records at fps "
                                                               f"{server_info.get('fps')}, the upload at "
                                                               f"{info.get('fps')!r}; a task has one fps (§3)",
                                  hint="upload it under another task name")
    decl = {k: v for k, v in info.items() if k not in SERVER_OWNED}
    raw_cams, raw_exts = info.get("cameras"), info.get("video_extensions")
    cams: dict[str, Any] = raw_cams if isinstance(raw_cams, dict) else {}
    exts: dict[str, Any] = raw_exts if isinstance(raw_exts, dict) else {}
    blocks = blocks_for(merge_info(server_info, decl))  # computed by the verification unless the merge adds a column
    try:
        check_feature_declarations(server_info, info.get("features") or {})
        check_stream_declarations(server_info, [(k, "rgb" if k in cams else "depth", str(e))
                                                for k, e in exts.items()])
        check_task_meta_mergeable(task_dir, server_info, decl, {c: b.mean.shape[0] for c, b in blocks.items()})
    except SchemaError as exc:
        raise UploadRejectedError(409, "declaration_conflict", exc.message, hint=exc.hint) from exc
    except FormatError as exc:
        raise UploadRejectedError(409, "server_task_broken", exc.one_line()) from exc
    added = [] if may_declare or fresh is not None else added_declarations(server_info, info)
    if added:
        raise may_not_declare(task, f"this upload would add {', '.join(added[:5])}"
                                     f"{' and more' if len(added) > 5 else ''} to task {task!r}, which does not "
                                     "declare it yet, and this token may not declare")
    return decl, blocks


def may_not_declare(task: str, what: str) -> UploadRejectedError:
    return UploadRejectedError(403, "may_not_declare", what,
                               hint=f"a token of scope declare:{task} (or upload:{task}) declares it: `egopool token "
                                    f"add --scope declare:{task}` on the server, then upload its first episode "
                                    "with that token")


def _same_fps(a: Any, b: Any) -> bool:
    """True when two ``fps`` values are the same number (the local writer never changes a task's fps)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)) and float(a) == float(b)

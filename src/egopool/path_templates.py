"""Path templates of ``info.json`` (``data_path``, ``video_path``, ``episodes_path``; file_format.md §2, §3,
checklist §12.2): checked, matched against file names, filled in for one episode.

:mod:`egopool.layout` builds the task's layout and enumerations on these.
"""

from __future__ import annotations

import re
import string
from typing import Any

from .errors import FormatError
from .meta.info import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH
from .storage import TaskPathLike

__all__ = ["FIELD_RE", "PNG_DIR_SUFFIX", "SKIP_DIR_PREFIXES", "TEMPLATE_FIELDS", "fill_template", "parse_template",
           "static_prefix", "template_regex"]


#: info.json template key -> the fields it must use, exactly (file_format.md §3, checklist §12.2).
TEMPLATE_FIELDS: dict[str, frozenset[str]] = {
    "data_path": frozenset({"c", "f"}),
    "episodes_path": frozenset({"c", "f"}),
    "video_path": frozenset({"c", "f", "image_key", "ext"}),
}


def parse_template(key: str, value: Any, path: TaskPathLike | None = None) -> str:
    """Check one path template of ``info.json`` (``data_path``, ``video_path``, ``episodes_path``).

    A template is a string using exactly the fields of :data:`TEMPLATE_FIELDS` (e.g.
    ``data/chunk-{c:03d}/episode-{f:03d}.parquet``) that formats with integers for ``c``/``f``.

    Raises
    ------
    FormatError
        Not a string, an unknown or missing field, or a format spec that does not format;
        names ``path`` (the info.json) and the key.
    """
    need = TEMPLATE_FIELDS[key]
    hint = "use the spec's template, e.g. " + {"data_path": DEFAULT_DATA_PATH, "episodes_path": DEFAULT_EPISODES_PATH,
                                               "video_path": DEFAULT_VIDEO_PATH}[key]
    if not isinstance(value, str) or not value:
        raise FormatError(f"template {key} is {value!r:.60}, not a path template string", path=path, hint=hint)
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        value.format(c=0, f=0, image_key="k", ext="mp4")
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise FormatError(f"template {key}={value!r} cannot be formatted ({exc}); it must use exactly the fields "
                          f"{sorted(need)}", path=path, hint=hint) from None
    if fields != need:
        raise FormatError(f"template {key}={value!r} uses fields {sorted(fields)}, it must use exactly {sorted(need)}",
                          path=path, hint=hint)
    return value


#: One ``{field}`` or ``{field:spec}`` of a template.
FIELD_RE = re.compile(r"\{(\w+)(?::[^}]*)?\}")
#: Entry names no template ever stands for: dotfiles, ``_trash/``, ``_migrate_backup_*`` (§11).
SKIP_DIR_PREFIXES = (".", "_")
#: The template's ``.{ext}`` tail (a PNG16 frame directory has none).
PNG_DIR_SUFFIX = re.compile(r"\.\{ext(?::[^}]*)?\}$")


def template_regex(template: str, legacy_prefix: bool) -> re.Pattern[str]:
    """Regex for a path template; numeric fields capture digits, others a path segment."""
    parts: list[str] = []
    pos = 0
    for m in FIELD_RE.finditer(template):
        literal = template[pos:m.start()]
        esc = re.escape(literal)
        if legacy_prefix:
            # pre-v1.1.2 per-episode names used "file-" where now "episode-" stands (§2).
            esc = esc.replace("episode\\-", "(?:episode|file)\\-").replace("episode-", "(?:episode|file)-")
        parts.append(esc)
        name = m.group(1)
        if name in ("c", "f"):
            parts.append(rf"(?P<{name}>\d+)")
        elif name == "ext":
            parts.append(r"(?P<ext>[^/.]+)")
        else:
            parts.append(rf"(?P<{name}>[^/]+)")
        pos = m.end()
    tail = re.escape(template[pos:])
    parts.append(tail)
    return re.compile("^" + "".join(parts) + "$")


def static_prefix(template: str) -> str:
    """The fixed directory part of a path template (``data/chunk-{c:03d}/...`` -> ``data``)."""
    head = template.split("{", 1)[0]
    return head.rsplit("/", 1)[0] if "/" in head else ""


def fill_template(template: str, c: int, f: int | None) -> str:
    """``template`` with N's chunk (and file, unless None) formatted in; other fields are kept."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        value = c if name in ("c", "chunk_index") else f if name in ("f", "file_index") else None
        if value is None:
            return m.group(0)
        return ("{" + m.group(0)[len(name) + 1:]).format(value)

    return FIELD_RE.sub(sub, template)

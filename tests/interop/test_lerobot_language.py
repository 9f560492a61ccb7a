"""LeRobot 0.6's language columns through a pooled task (docs/decisions.md I22, I23): ``import lerobot`` keeps
``language_persistent`` / ``language_events`` as JSON string columns, ``export lerobot`` writes them back in
lerobot's types with the same rows, ``--events-from`` adds reviewers' rows without repeating imported ones.
No lerobot here: the dataset's language columns are written the way lerobot 0.6.1's annotation writer writes them
(pyarrow's inferred types: ``tool_calls`` a list of structs, a float64 ``timestamp``); the lerobot 0.6.1 reader's
view is tested in test_lerobot06_events.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import TaskWriter, open_task, vector_column
from egopool.cli.app import main
from egopool.errors import FormatError
from egopool.interop import export_lerobot
from egopool.interop.lerobot_events import ExportEvents
from egopool.interop.lerobot_import import import_lerobot
from egopool.interop.lerobot_language import language_type, rows_of
from egopool.curation.review_events import ReviewEvent

FPS = 15
SAY = {"type": "function", "function": {"name": "say", "description": "Speak.",
                                        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}


def _task(root: Path, name: str = "pour", lengths=(9, 6)) -> Path:
    tw = TaskWriter(root, name, fps=float(FPS))
    for k, n in enumerate(lengths):
        ep = tw.begin_episode(columns=[vector_column("observation.joints", [3])], created_at=1.7e9 + k)
        for i in range(n):
            ep.add_frame({"observation.joints": np.full(3, i + k, np.float32)})
        ep.finish()
    return root / name


def _annotated(tmp_path: Path) -> tuple[Path, dict[str, list]]:
    """A LeRobot dataset (egopool's export of a 2-episode task) given language columns the way lerobot's annotation
    writer writes them, and ``{column: rows per dataset frame}``."""
    out = tmp_path / "lr"
    export_lerobot(_task(tmp_path / "src"), out)
    written: dict[str, list] = {"language_persistent": [], "language_events": []}
    for e, n in enumerate((9, 6)):
        path = out / "data" / "chunk-000" / f"file-{e:03d}.parquet"
        table = pq.read_table(path)
        ts = [float(np.float32(i / FPS)) for i in range(n)]
        persistent = [{"role": "assistant", "content": f"reach {e}", "style": "subtask", "timestamp": ts[0],
                       "camera": None, "tool_calls": None},
                      {"role": "user", "content": "pour the tea", "style": "task_aug", "timestamp": ts[0],
                       "camera": None, "tool_calls": None},
                      {"role": "assistant", "content": "tilt", "style": "subtask", "timestamp": ts[3],
                       "camera": None, "tool_calls": None}]
        events: list[list] = [[] for _ in range(n)]
        events[2] = [{"role": "assistant", "content": None, "style": None, "camera": None,
                      "tool_calls": [{"function": {"arguments": {"text": "ok, slower"}, "name": "say"},
                                      "type": "function"}]},
                     {"role": "user", "content": "slower", "style": "interjection", "camera": None,
                      "tool_calls": None}]
        rows_p = [persistent] * n
        table = table.append_column("language_persistent", pa.array(rows_p))
        table = table.append_column("language_events", pa.array(events))
        pq.write_table(table, path)
        written["language_persistent"] += rows_p
        written["language_events"] += events
    info_path = out / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"] |= {n: {"dtype": "language", "shape": [1], "names": None} for n in written}
    info["tools"] = [SAY]
    info_path.write_text(json.dumps(info))
    (out / "egopool_mapping.json").unlink()  # a dataset egopool did not write: generic names
    return out, written


def _read(out: Path, name: str) -> list:
    return [r for f in sorted((out / "data").rglob("*.parquet")) for r in rows_of(pq.read_table(f).column(name), name)]


@pytest.mark.parametrize("via", ["directory", "cli"])
def test_language_columns_import_validate_and_export_back(tmp_path, via):
    src, written = _annotated(tmp_path)
    assert not any(r["tool_calls"] is None for r in written["language_events"][2][:1])
    result = import_lerobot(src, tmp_path / "rec", task="t")
    assert any("language_events -> observation.language_events" in n for n in result.notes)
    task = open_task(tmp_path / "rec" / "t")
    assert main(["validate", str(task.path)]) == 0
    decl = task.info["features"]["observation.language_events"]
    assert decl["dtype"] == "string" and decl["info"]["lerobot"] == "language_events"
    assert decl["info"]["tools"] == [SAY]
    ep = task.episode(1)
    texts = pq.read_table(ep.files.data).column("observation.language_events").to_pylist()
    assert json.loads(texts[2]) == written["language_events"][2] and texts[0] == "[]"
    back = tmp_path / "back"
    if via == "cli":
        assert main(["export", "lerobot", str(task.path), str(back)]) == 0
    else:
        export_lerobot(task.path, back)
    for name in ("language_persistent", "language_events"):
        assert pq.read_schema(back / "data" / "chunk-000" / "file-000.parquet").field(name).type == language_type(name)
        assert _read(back, name) == written[name]
    info = json.loads((back / "meta" / "info.json").read_text())
    assert info["tools"] == [SAY]
    assert info["features"]["language_events"] == {"dtype": "language", "shape": [1], "names": None}
    assert "language_events" not in json.loads((back / "meta" / "stats.json").read_text())
    # and once more: an egopool export, imported under its mapping's names, gives the same rows
    import_lerobot(back, tmp_path / "rec", task="t2")
    again = tmp_path / "again"
    export_lerobot(tmp_path / "rec" / "t2", again)
    assert _read(again, "language_events") == written["language_events"]


def _event(n: int, t0: float, t1: float, label: str, note: str = "", i: int = 1) -> ReviewEvent:
    return ReviewEvent("pour", n, t0, t1, label, note, id=i)


def test_review_events_are_added_after_imported_rows_and_not_repeated(tmp_path):
    src = _task(tmp_path / "src")
    first = ExportEvents("events.json", {1: [_event(1, 0.0, 0.3, "reach")], 2: [_event(2, 0.2, 0.3, "slip", "wet")]})
    export_lerobot(src, tmp_path / "lr", events=first)
    import_lerobot(tmp_path / "lr", tmp_path / "rec", task="pour")
    task = tmp_path / "rec" / "pour"
    assert main(["validate", str(task)]) == 0
    plain = export_lerobot(task, tmp_path / "plain")  # the imported events alone: as they were
    assert _read(tmp_path / "plain", "language_events") == _read(tmp_path / "lr", "language_events")
    assert plain.warnings == ("action is constant in every exported frame (the pooled placeholder [0.0]): a policy "
                              "learns nothing from it; choose the commanded signals with --action (e.g. the next "
                              "gripper state / TCP pose)",)
    # the same events again, and a new one on a frame that has one: merged, each once
    more = ExportEvents("events.json", {1: [_event(1, 0.0, 0.3, "reach"), _event(1, 0.0, 0.1, "look", i=3)],
                                        2: [_event(2, 0.2, 0.3, "slip", "wet")]})
    result = export_lerobot(task, tmp_path / "merged", events=more)
    assert result.events_repeated == 2
    assert result.warnings[0] == "2 event(s) were in the task's language_events already (imported with it): written once"
    rows = _read(tmp_path / "merged", "language_events")
    assert [r["content"] for r in rows[0]] == ["reach", "look"]
    assert [r["content"] for r in rows[9 + 3]] == ["slip: wet"]
    assert sum(len(r) for r in rows) == 3
    mapping = json.loads((tmp_path / "merged" / "egopool_mapping.json").read_text())
    assert mapping["events"]["already_in_data"] == 2
    assert mapping["features"]["language_events"]["from"] == ["observation.language_events", "review events"]


def test_an_episode_without_the_column_gets_no_rows_and_lerobot04_keeps_the_text(tmp_path):
    src, written = _annotated(tmp_path)
    import_lerobot(src, tmp_path / "rec", task="t")
    task = tmp_path / "rec" / "t"
    tw = TaskWriter(tmp_path / "rec", "t", fps=float(FPS))  # a recorded episode, no language column
    ep = tw.begin_episode(columns=[vector_column("observation.joints", [3])])
    for i in range(4):
        ep.add_frame({"observation.joints": np.full(3, i, np.float32)})
    ep.finish()
    export_lerobot(task, tmp_path / "back")
    assert _read(tmp_path / "back", "language_events") == written["language_events"] + [[]] * 4
    assert _read(tmp_path / "back", "language_persistent") == written["language_persistent"] + [[]] * 4
    old = export_lerobot(task, tmp_path / "old", lerobot="0.4", episodes=[1, 2])
    assert "observation.language_events" in {c.name for c in old.plan.columns}
    table = pq.read_table(tmp_path / "old" / "data" / "chunk-000" / "file-000.parquet")
    assert "language_events" not in table.column_names
    assert json.loads(table.column("observation.language_events")[2].as_py()) == written["language_events"][2]


def test_a_damaged_language_cell_is_refused_in_one_line(tmp_path):
    src, _ = _annotated(tmp_path)
    path = src / "data" / "chunk-000" / "file-001.parquet"
    table = pq.read_table(path)
    at = table.column_names.index("language_events")
    pq.write_table(table.set_column(at, "language_events", pa.array([1] * table.num_rows)), path)
    with pytest.raises(FormatError, match="column 'language_events' holds int64, not LeRobot's language_events rows"):
        import_lerobot(src, tmp_path / "rec", task="t")
    assert not (tmp_path / "rec" / "t").exists()


@pytest.mark.extra("s3")
def test_language_columns_travel_through_sync_and_edit(tmp_path, s3_server, monkeypatch):
    """The pooled language columns are rows like any other: sync to a bucket, `edit split` there, `edit
    rename-column` of another column, sync back; the export gives the same LeRobot rows and validate is clean."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    src, written = _annotated(tmp_path)
    import_lerobot(src, tmp_path / "rec", task="t")
    s3_server.create_bucket("langs")
    assert main(["sync", str(tmp_path / "rec" / "t"), "s3://langs/pooled/t"]) == 0
    assert main(["edit", "split", "s3://langs/pooled/t", "--into", "s3://langs/pooled/t2", "--episodes", "2"]) == 0
    assert main(["edit", "rename-column", "s3://langs/pooled/t2", "observation.joints", "observation.joint_pos"]) == 0
    assert main(["sync", "s3://langs/pooled/t2", str(tmp_path / "back" / "t2")]) == 0
    assert main(["validate", str(tmp_path / "back" / "t2")]) == 0
    export_lerobot(tmp_path / "back" / "t2", tmp_path / "lr2")
    for name in ("language_persistent", "language_events"):
        assert _read(tmp_path / "lr2", name) == written[name][9:]
    info = json.loads((tmp_path / "lr2" / "meta" / "info.json").read_text())
    assert info["tools"] == [SAY] and "observation.joint_pos" in info["features"]


@pytest.mark.extra("server")
def test_language_columns_travel_through_the_server(tmp_path):
    """Uploaded to a real `egopool serve` (verified, pooled into its store): the store's task exports the same
    LeRobot rows."""
    pytest.importorskip("fastapi")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "transfer"))
    from transfer_helpers import ServerProc

    from egopool.server.tokens import add_token
    from egopool.transfer import upload_episodes

    src, written = _annotated(tmp_path)
    import_lerobot(src, tmp_path / "rec", task="t")
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc", ["upload:*", "declare:*"])
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(tmp_path / "rec" / "t", server=srv.url, token=up).ok
    assert main(["validate", str(tmp_path / "store" / "t")]) == 0
    export_lerobot(tmp_path / "store" / "t", tmp_path / "lr2")
    for name in ("language_persistent", "language_events"):
        assert _read(tmp_path / "lr2", name) == written[name]
    assert json.loads((tmp_path / "lr2" / "meta" / "info.json").read_text())["tools"] == [SAY]


def _imported_with_events_cell(tmp_path, text: str):
    """The annotated dataset imported as task ``t``, then episode 2's row 3 of ``observation.language_events``
    set to ``text`` by hand; returns (the LeRobot source, the episode's data file)."""
    src, _ = _annotated(tmp_path)
    import_lerobot(src, tmp_path / "rec", task="t")
    path = open_task(tmp_path / "rec" / "t").episode(2).files.data
    table = pq.read_table(path)
    at = table.column_names.index("observation.language_events")
    texts = table.column(at).to_pylist()
    texts[3] = text
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(texts, pa.string())), path)
    return src, path


def test_a_pooled_language_cell_that_is_not_json_is_refused_by_the_export(tmp_path):
    src, path = _imported_with_events_cell(tmp_path, "[{\"role\": ")
    with pytest.raises(FormatError, match="episode 2 row 3: observation.language_events is not JSON") as exc:
        export_lerobot(tmp_path / "rec" / "t", tmp_path / "out")
    assert "\n" not in exc.value.message and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("column, row, field", [
    ("language_persistent", {"role": None, "content": "x", "style": "subtask", "timestamp": 0.0, "camera": None,
                             "tool_calls": None}, "role"),
    ("language_events", {"role": "user", "content": "x", "style": "interjection", "camera": None, "tool_calls": None,
                         "timestamp": 0.2}, "timestamp"),
    ("language_events", {"role": "user", "content": "x", "style": "shout", "camera": None, "tool_calls": None},
     "style"),
    ("language_events", {"role": "user", "content": "what is red?", "style": "vqa", "camera": None,
                         "tool_calls": None}, "camera"),
    ("language_persistent", {"role": "user", "content": "x", "style": "interjection", "timestamp": 0.0,
                             "camera": None, "tool_calls": None}, "style")])
def test_a_row_lerobot_06_would_not_write_is_refused_at_import(tmp_path, column, row, field):
    """Issue 27 review: malformed rows were imported silently and failed (or not) at export, naming no file."""
    src, _ = _annotated(tmp_path)
    path = src / "data" / "chunk-000" / "file-001.parquet"
    table = pq.read_table(path)
    at = table.column_names.index(column)
    rows = table.column(at).to_pylist()
    rows[4] = [*(rows[4] or []), row]
    table = table.set_column(at, column, pa.array(rows))
    pq.write_table(table, path)
    with pytest.raises(FormatError, match=f"episode 1 frame 4: a {column} row's {field} ") as exc:
        import_lerobot(src, tmp_path / "rec", task="t")
    assert exc.value.path is not None and str(exc.value.path).endswith("file-001.parquet")
    assert "\n" not in exc.value.message and not (tmp_path / "rec" / "t").exists()


def test_the_exports_language_error_names_the_task_and_the_episode_file(tmp_path):
    _, path = _imported_with_events_cell(
        tmp_path, json.dumps([{"role": "user", "content": "look", "style": "vqa", "camera": None, "tool_calls": None}]))
    with pytest.raises(FormatError, match="task 't' episode 2 row 3: observation.language_events: a row's camera "
                                          "is None: a vqa row names") as exc:
        export_lerobot(tmp_path / "rec" / "t", tmp_path / "out")
    assert str(exc.value.path) == str(path) and not (tmp_path / "out").exists()


def test_an_event_past_its_episodes_end_is_counted_as_not_carried(tmp_path, capsys):
    """Issue 27 review: an event starting after its episode's end was counted as carried and called "clipped"."""
    task = _task(tmp_path / "src")  # episodes 1 (9 frames, 0.6 s) and 2 (6 frames, 0.4 s) at 15 fps
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"events": [
        {"id": 1, "task": "pour", "episode_index": 1, "t0": 0.2, "t1": 0.4, "label": "in"},
        {"id": 2, "task": "pour", "episode_index": 2, "t0": 0.2, "t1": 0.9, "label": "long"},
        {"id": 3, "task": "pour", "episode_index": 2, "t0": 0.5, "t1": 0.7, "label": "past"}], "next_cursor": None}))
    out = tmp_path / "lr"
    assert main(["export", "lerobot", str(task), str(out), "--events-from", str(events)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "1 event(s) cover no frame of their episode (they start at or after its end): not carried (e.g. " \
           "episode 2 [0.5, 0.7) s 'past'; the episode has 6 frames, 0.4 s)" in text, text
    assert "1 event(s) end after their episode's last frame, clipped to it (e.g. episode 2 [0.2, 0.9) s " \
           "'long')" in text
    assert "events: 2 of " in text
    rows = [r for frame in _read(out, "language_events") for r in frame]
    assert sorted(r["content"] for r in rows) == ["in", "long"]

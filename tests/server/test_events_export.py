"""Events round trip (docs/decisions.md P16, P17): made on the server's API (the page posts the same requests,
test_events_browser.py), then `export lerobot --events-from <the server's GET /api/v1/events URL>` on the
server's task directory: the mapping names every event of the exported episodes with its frames, and
lerobot >= 0.6's ``language_events`` column holds one row on each range's first frame (lerobot 0.4: the
mapping only). The lerobot 0.6.1 venv reads them back: tests/interop/test_lerobot06_events.py."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.cli.app import main  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def test_events_from_the_server_reach_the_lerobot_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    task = write_task(tmp_path / "pc", "pick_cup", episodes=3, rows=30, video=False)  # 1 s each at 30 fps
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        h = {"Authorization": f"Bearer {anna}"}
        for n, t0, t1, label, note in ((1, 0.1, 0.4, "reach", ""), (3, 0.5, 1.0, "slip", "cup <slides>"),
                                       (2, 0.0, 0.2, "slip", "not exported")):
            r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{n}/events", headers=h,
                           json={"episode": n, "t0": t0, "t1": t1, "label": label, "note": note})
            assert r.status_code == 200, r.text
        url = f"{srv.url}/api/v1/events?task=pick_cup&limit=2"  # two pages: the cursor is followed
        monkeypatch.setenv("EGOPOOL_TOKEN", anna)
        out = tmp_path / "lr"
        assert main(["export", "lerobot", str(tmp_path / "store" / "pick_cup"), str(out), "-e", "1", "-e", "3",
                     "--events-from", url]) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert f"events: 2 of {url} carried" in said
        assert "warning 1 event(s) of episode(s) 2 not carried: not exported" in said
        out4 = tmp_path / "lr04"
        assert main(["export", "lerobot", str(tmp_path / "store" / "pick_cup"), str(out4), "--lerobot", "0.4",
                     "--events-from", url]) == 0
        monkeypatch.setenv("EGOPOOL_TOKEN", "wrong")
        assert main(["export", "lerobot", str(tmp_path / "store" / "pick_cup"), str(tmp_path / "x"),
                     "--events-from", url]) != 0
        assert "the server refused the events" in " ".join(capsys.readouterr().err.split())
        assert not (tmp_path / "x").exists()

    mapping = json.loads((out / "egopool_mapping.json").read_text())
    ev = mapping["events"]
    assert ev["from"] == url and ev["left_out"] == 1
    assert [(e["episode_index"], e["lerobot_episode_index"], e["label"], e["note"], e["frames"], e["token_id"])
            for e in ev["events"]] == [(1, 0, "reach", "", [3, 12], "anna"), (3, 1, "slip", "cup <slides>", [15, 30],
                                                                              "anna")]
    assert ev["events"][1]["language_events"] == {"frame_index": 15, "timestamp": 0.5, "role": "user",
                                                  "style": "interjection", "content": "slip: cup <slides>"}
    assert mapping["features"]["language_events"]["from"] == ["review events"]
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["language_events"] == {"dtype": "language", "shape": [1], "names": None}
    for e, (frame, content) in enumerate(((3, "reach"), (15, "slip: cup <slides>"))):
        table = pq.read_table(out / "data" / "chunk-000" / f"file-{e:03d}.parquet")
        rows = table.column("language_events").to_pylist()
        assert [(i, [r["content"] for r in v]) for i, v in enumerate(rows) if v] == [(frame, [content])]
        assert all(r["style"] == "interjection" and r["role"] == "user" and r["camera"] is None
                   and r["tool_calls"] is None for v in rows for r in v)
        assert pq.ParquetFile(out / "data" / "chunk-000" / f"file-{e:03d}.parquet").metadata.num_row_groups == 1

    m4 = json.loads((out4 / "egopool_mapping.json").read_text())
    assert [e["label"] for e in m4["events"]["events"]] == ["reach", "slip", "slip"]
    assert all(e["language_events"] is None for e in m4["events"]["events"])
    assert "language_events" not in pq.read_schema(out4 / "data" / "chunk-000" / "file-000.parquet").names


def test_events_left_out_of_an_export_are_said_never_dropped_silently(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: a saved page of a longer answer, events of another task or of a missing episode, and an
    event past its episode's end were carried or dropped without a word (exit 0, "events: 0 of ... carried")."""
    task = write_task(tmp_path / "pc", "pick_cup", episodes=1, rows=30, video=False)  # 1 s at 30 fps
    saved = tmp_path / "events.json"

    def ev(task_name: str, n: int, t0: float, t1: float, label: str) -> dict[str, object]:
        return {"task": task_name, "episode_index": n, "t0": t0, "t1": t1, "label": label}

    saved.write_text(json.dumps({"events": [ev("pick_cup", 1, 0.5, 100.0, "long"), ev("place_cup", 1, 0.0, 0.5, "x"),
                                            ev("pick_cup", 9, 0.0, 0.5, "gone")], "next_cursor": "5"}))
    out = tmp_path / "lr"
    assert main(["export", "lerobot", str(task), str(out), "--events-from", str(saved)]) == 0
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    assert f"{saved} is one page of a longer answer (next_cursor '5'): only its 3 event(s) are carried" in said
    assert "1 event(s) name other tasks than 'pick_cup', not carried: 'place_cup' (1)" in said
    assert "1 event(s) of episode(s) 9 not carried" in said
    assert "1 event(s) end after their episode's last frame, clipped to it (e.g. episode 1 [0.5, 100) s 'long')" \
        in said
    assert f"events: 1 of {saved} carried" in said
    mapping = json.loads((out / "egopool_mapping.json").read_text())["events"]
    assert [(e["label"], e["frames"]) for e in mapping["events"]] == [("long", [15, 30])]

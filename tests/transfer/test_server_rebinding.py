"""A server without tokens answers only requests addressed to loopback (docs/decisions.md U24, U27).

DNS rebinding: a page of another site whose name is made to resolve to 127.0.0.1 is, to the browser, the
same origin as the loopback server (``Origin`` and ``Host`` both name the attacker's host,
``Sec-Fetch-Site: same-origin``), so the header check of U24 alone let it upload, queue previews,
review and read the pool. The ``Host`` header still names the attacker's host: it is refused (403, no
upload log row), while ``127.0.0.1``, ``localhost`` and ``[::1]`` are answered as before.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")


def test_rebound_host_is_refused_without_tokens(tmp_path: Path) -> None:
    with ServerProc(tmp_path / "store", "--no-previews") as srv:
        port = srv.port
        rebound = {"Host": f"rebind.evil.example:{port}", "Origin": f"http://rebind.evil.example:{port}",
                   "Sec-Fetch-Site": "same-origin"}
        uploads = len(httpx.get(f"{srv.url}/api/v1/uploads").json()["uploads"])
        r = httpx.post(f"{srv.url}/api/v1/session/upload", headers=rebound,
                       files={"name": (None, "t"), "file": ("e.zip", b"PK\x05\x06" + bytes(18))})
        assert r.status_code == 403 and "rebind.evil.example" in r.json()["message"], r.text
        r = httpx.post(f"{srv.url}/api/v1/tasks/t/episodes/1/review", json={"verdict": "accept"}, headers=rebound)
        assert r.status_code == 403, r.text
        r = httpx.post(f"{srv.url}/api/v1/tasks/t/episodes/1/preview", headers=rebound)
        assert r.status_code == 403, r.text
        r = httpx.get(f"{srv.url}/api/v1/tasks", headers={"Host": f"rebind.evil.example:{port}"})
        assert r.status_code == 403, r.text
        r = httpx.get(f"{srv.url}/", headers={"Host": f"rebind.evil.example:{port}"})
        assert r.status_code == 403 and "rebind.evil.example" in r.text
        assert len(httpx.get(f"{srv.url}/api/v1/uploads").json()["uploads"]) == uploads  # no log row
        # loopback names, however written, are answered as before
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", f"[::1]:{port}", "127.0.0.1"):
            r = httpx.get(f"{srv.url}/api/v1/tasks", headers={"Host": host})
            assert r.status_code == 200, (host, r.text)
        same = {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}", "Sec-Fetch-Site": "same-origin"}
        r = httpx.post(f"{srv.url}/api/v1/tasks/t/episodes/1/preview", headers=same)
        assert r.status_code == 409, r.text  # past the checks: this server runs with --no-previews


def test_another_sites_page_cannot_sign_in_or_out(tmp_path: Path) -> None:
    """``/login`` and ``/logout`` are POSTs too: another site's page must not sign the browser in with a token
    of its choosing (its reviews would then be recorded under that token) nor sign it out (U24, U27)."""
    from egopool.server.tokens import add_token
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "viewer", ["read"])
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        for hdr in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
            r = httpx.post(f"{srv.url}/login", data={"token": token}, headers=hdr)
            assert r.status_code == 403 and "set-cookie" not in r.headers, r.text
            r = httpx.post(f"{srv.url}/logout", headers=hdr, cookies={"egopool_token": token})
            assert r.status_code == 403 and "set-cookie" not in r.headers, r.text
        # the server's own sign-in form, and clients without browser headers, as before
        for hdr in ({"Sec-Fetch-Site": "same-origin", "Origin": srv.url}, {}):
            r = httpx.post(f"{srv.url}/login", data={"token": token}, headers=hdr)
            assert r.status_code == 303 and "egopool_token=" in r.headers["set-cookie"], r.text
            r = httpx.post(f"{srv.url}/logout", headers=hdr)
            assert r.status_code == 303 and "egopool_token=" in r.headers["set-cookie"], r.text

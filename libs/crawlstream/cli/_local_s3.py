"""``crawlstream local-s3``: a real S3-compatible server (versitygw) on loopback, until Ctrl-C.

What the README's "lake, index and archive on S3, locally" runs: versitygw built by ``make s3``
bound to a free port of 127.0.0.1, its posix backend keeping the objects in ``--data-dir``
(``<data dir>/s3``) or a temp dir removed on exit, the bucket created, then ``KEY=value`` lines
on stdout: the endpoint, the credentials and the locations of the lake (with the index) and
the store's archive tier, so that ``crawlstream local-s3 > s3.env &`` then ``export $(cat s3.env)``
is the whole set-up of every other command. SIGTERM or Ctrl-C stops the server.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register", "run"]

SETTINGS_SECTIONS: tuple[str, ...] | None = ()


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "local-s3",
        parents=[common],
        help="run a real S3 server (versitygw) on 127.0.0.1 until Ctrl-C; prints CRAWLSTREAM_S3_ENDPOINT=... and "
        "the locations",
    )
    p.add_argument("--bucket", default="crawlstream", help="the bucket to create (default: crawlstream)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.devtools.locals3 import LocalS3
    from crawlstream.objectstore import parse_location
    from crawlstream.runtime import install_stop_signals

    parse_location(f"s3://{args.bucket}", setting="--bucket")  # ConfigError for a bad name
    given = args.data_dir is not None or "CRAWLSTREAM_DATA_DIR" in os.environ
    s3_dir = settings.data_dir / "s3" if given else None
    stop = threading.Event()
    install_stop_signals(stop.set)
    server = LocalS3(data_dir=s3_dir, buckets=(args.bucket,))
    if s3_dir is not None:
        # the same credentials across restarts of a kept server (a lake on it keeps working)
        secret_file = s3_dir / "secret"
        s3_dir.mkdir(parents=True, exist_ok=True)
        if secret_file.exists():
            server.secret_key = secret_file.read_text().strip()
        else:
            from crawlstream.durable import write_atomically

            write_atomically(secret_file, server.secret_key.encode(), mode=0o600)
    server.start()
    try:
        lines = {
            **server.env,
            "CRAWLSTREAM_LAKE_URI": f"s3://{args.bucket}/lake",
            "CRAWLSTREAM_STORE_ARCHIVE_URI": f"s3://{args.bucket}/archive",
        }
        sys.stdout.write("".join(f"{k}={v}\n" for k, v in lines.items()))
        sys.stdout.flush()
        sys.stderr.write(f"S3 (versitygw) on {server.endpoint}, bucket {args.bucket}, objects in "
                         f"{server.objects_dir}. Ctrl-C stops it.\n")
        while not stop.wait(1.0):
            if server.pid is None:
                sys.stderr.write(f"versitygw exited; see {server.log_file}\n")
                return 1
    finally:
        server.stop()
    return 0

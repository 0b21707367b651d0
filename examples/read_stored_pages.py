"""Follow ``content.stored`` and fetch each stored page through the query API.

    python examples/read_stored_pages.py --bootstrap-servers HOST:PORT --api http://127.0.0.1:8080 \\
        --group my-reader [--token TOKEN] [--max-idle-s 5]

A consumer of its own group reads ``crawlstream.v1.ContentStored`` events from the first
offset, fetches ``GET /v1/content?url=...`` for each page stored with status 200, checks the
body against the event's content hash (the API's ``X-Content-Hash`` header carries the same
value), and commits after each batch. One JSON line per page on stdout, then a summary when
no event arrived for ``--max-idle-s``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from confluent_kafka import Consumer
from contract import Schemas

TOPIC = "content.stored"


def fetch(api: str, url: str, token: str | None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(f"{api}/v1/content?url={urllib.parse.quote(url, safe='')}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--api", required=True, help="the query API's base URL")
    parser.add_argument("--group", required=True)
    parser.add_argument("--token", default=None)
    parser.add_argument("--max-idle-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    schemas = Schemas()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    totals = {"events": 0, "fetched": 0, "bytes": 0, "hash_mismatch": 0, "not_served": 0, "undecodable": 0}
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < args.max_idle_s:
            batch = consumer.consume(500, 1.0)
            if not batch:
                continue
            idle_since = time.monotonic()
            for msg in batch:
                if msg.error():
                    continue
                totals["events"] += 1
                try:
                    event = schemas.decode(msg.value())
                except (ValueError, EOFError):
                    totals["undecodable"] += 1
                    continue
                if event["status"] != 200:
                    continue
                status, body, headers = fetch(args.api, event["url"], args.token)
                if status != 200:
                    totals["not_served"] += 1
                    print(json.dumps({"url": event["url"], "status": status}))
                    continue
                same = headers.get("X-Content-Hash") == event["content_hash"] and len(body) == event["size_bytes"]
                totals["fetched"] += 1
                totals["bytes"] += len(body)
                totals["hash_mismatch"] += not same
                print(json.dumps({"url": event["url"], "status": status, "bytes": len(body), "hash_ok": same}))
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    print(json.dumps({"summary": totals}))
    return 0 if not totals["hash_mismatch"] else 1


if __name__ == "__main__":
    sys.exit(main())

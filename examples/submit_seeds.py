"""Submit seed URLs to a running crawl by producing them to ``urls.discovered``.

    python examples/submit_seeds.py --bootstrap-servers HOST:PORT https://example.com/ ...
    python examples/submit_seeds.py --bootstrap-servers HOST:PORT --file seeds.txt

Each URL becomes a ``crawlstream.v1.DiscoveredUrl`` (source "external", depth 0) keyed by its
registered domain, in partition ``checksum(domain) mod P``, with its ``url_key``
(schemas/URL_KEYS.md). The deduper drops URLs it has seen, so submitting twice crawls once.
Prints one JSON line: sent, skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Producer
from contract import Schemas, partition, partition_count, simple_canonical, url_key

TOPIC = "urls.discovered"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--file", action="append", default=[], help="a file of one URL per line")
    parser.add_argument("--dataset-id", type=int, default=None, help="crawl dataset (default: the crawl's)")
    parser.add_argument("urls", nargs="*")
    args = parser.parse_args(argv)
    urls = list(args.urls)
    for path in args.file:
        with open(path, encoding="utf-8-sig") as lines:
            urls += [u.strip() for u in lines if u.strip() and not u.startswith("#")]
    schemas = Schemas()
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "enable.idempotence": True, "acks": "all"})
    partitions = partition_count(producer, TOPIC)
    failures: list[str] = []
    sent = skipped = 0
    for raw in urls:
        try:
            url, domain = simple_canonical(raw)
        except ValueError:
            skipped += 1
            continue
        event = {
            "url": url,
            "domain": domain,
            "url_key": url_key(url, domain),
            "depth": 0,
            "discovered_at_ms": int(time.time() * 1000),
            "source": "external",
            "source_url": None,
            "dataset_id": args.dataset_id,
            "priority": None,
        }
        producer.produce(
            TOPIC,
            schemas.encode(TOPIC, event),
            domain.encode(),
            partition=partition(domain, partitions),
            on_delivery=lambda err, msg: failures.append(str(err)) if err else None,
        )
        sent += 1
    if producer.flush(60) or failures:
        print(f"not delivered: {failures[:1]}", file=sys.stderr)
        return 1
    print(json.dumps({"sent": sent, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

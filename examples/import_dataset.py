"""Import a URL dataset into crawlstream by producing it to ``urls.records``.

    python examples/import_dataset.py --bootstrap-servers HOST:PORT --dataset-id 7 urls.txt

One URL per line (blank lines and ``#`` comments skipped). Each becomes a
``crawlstream.v1.UrlRecord`` in the Confluent wire format, keyed by its registered domain and
sent to partition ``checksum(domain) mod P`` (schemas/README.md). A line that is not an
http(s) URL is counted and skipped. The Parquet sink turns the records into lake rows; the
next index build serves them. Prints one JSON line: sent, skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Producer
from contract import Schemas, partition, partition_count, simple_canonical

TOPIC = "urls.records"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--dataset-id", type=int, required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    schemas = Schemas()
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": 20,
        }
    )
    partitions = partition_count(producer, TOPIC)
    failures: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = skipped = 0
    now_ms = int(time.time() * 1000)
    for path in args.files:
        with open(path, encoding="utf-8-sig", errors="replace") as lines:
            for line in lines:
                url = line.strip()
                if not url or url.startswith("#"):
                    continue
                try:
                    _, domain = simple_canonical(url)
                except ValueError:
                    skipped += 1
                    continue
                record = {"dataset_id": args.dataset_id, "url": url, "ts_ms": now_ms, "extras": {}, "domain": domain}
                while True:
                    try:
                        producer.produce(
                            TOPIC,
                            schemas.encode(TOPIC, record),
                            domain.encode(),
                            partition=partition(domain, partitions),
                            on_delivery=on_delivery,
                        )
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        producer.poll(0.1)
                producer.poll(0)
                sent += 1
    if producer.flush(60) or failures:
        print(f"not delivered: {len(failures)} failed, first: {failures[:1]}", file=sys.stderr)
        return 1
    print(json.dumps({"sent": sent, "skipped": skipped, "dataset_id": args.dataset_id}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

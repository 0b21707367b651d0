"""The soak's API client: a user paging through answers the whole time, on its own thread.

It asks the query API (its own process, on loopback) for a random domain's datasets, then walks
one dataset's URLs page by page by ``next_offset``, and checks each walk: no URL twice, as many
URLs as the total the first page announced (unless the index moved to a new version mid-walk:
then the walk restarts). Answers are counted by outcome; a refused connection (the API killed)
or a 503 are outages, anything else unexpected is an error the summary reports.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import quote

PAGE_LIMIT = 100
PAUSE_S = 0.2  # between walks: a steady reader, not a load test


class ApiClient:
    def __init__(self, port: int, domains: list[str], rng: random.Random) -> None:
        self.port = port
        self.domains = domains
        self.rng = rng
        self.outcomes: Counter[str] = Counter()
        self.walks = 0
        self.bad_walks: list[str] = []
        self._busy = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-client", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def in_flight(self) -> bool:
        """True while a request is on the wire (the API kill waits for one)."""
        return self._busy.is_set()

    def summary(self) -> dict[str, Any]:
        return {"walks": self.walks, "answers": dict(self.outcomes), "bad_walks": len(self.bad_walks),
                "bad_examples": self.bad_walks[:10]}

    def _get(self, path: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        self._busy.set()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            self._busy.clear()
            conn.close()
        self.outcomes[str(resp.status)] += 1
        return resp.status, json.loads(body) if body and resp.status == 200 else None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._walk(self.rng.choice(self.domains))
            except (OSError, http.client.HTTPException) as exc:
                self.outcomes[f"unavailable ({type(exc).__name__})"] += 1
                self._stop.wait(1.0)
            except ValueError as exc:  # a body that is not JSON
                self.outcomes["bad body"] += 1
                self.bad_walks.append(f"bad body: {exc}")
            self._stop.wait(PAUSE_S)

    def _walk(self, domain: str) -> None:
        status, body = self._get(f"/v1/domain/{quote(domain)}")
        if status != 200 or not body["datasets"]:
            return
        dataset = self.rng.choice(body["datasets"])
        seen: list[str] = []
        offset: int | None = 0
        version = None
        total = None
        while offset is not None and not self._stop.is_set():
            status, page = self._get(
                f"/v1/domain/{quote(domain)}/datasets/{dataset['dataset_id']}/urls?offset={offset}&limit={PAGE_LIMIT}"
            )
            if status != 200:
                return
            if version is not None and page.get("index_version") != version:
                return  # a new version mid-walk: offsets refer to another listing
            version, total = page.get("index_version"), page["total"]
            seen.extend(item["url"] for item in page["items"])
            offset = page["next_offset"]
            time.sleep(0.01)
        if offset is None:
            self.walks += 1
            if len(seen) != len(set(seen)) or len(seen) != total:
                self.bad_walks.append(f"{domain}/{dataset['dataset_id']}: {len(seen)} URLs, "
                                      f"{len(set(seen))} distinct, total {total}")

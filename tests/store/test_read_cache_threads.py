"""The store's descriptor cache under threads (``store._files.ReadCache``): a descriptor one
thread closes is never closed again, nor read, after the kernel gave its number to another file.

Found by the full suite: a put failed with EBADF on index.log while a maintenance step removed
segments (``forget``) and the cache, full, closed every descriptor (``close``) on another thread.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from crawlstream.store._files import AppendFile, ReadCache


def test_reads_forgets_and_closes_on_threads_never_touch_another_files_descriptor(tmp_path: Path) -> None:
    paths = []
    for i in range(6):
        path = tmp_path / f"{i}.seg"
        path.write_bytes(bytes([i]) * 4096)
        paths.append(path)
    cache = ReadCache(max_open=2)  # full after two: every third open closes them all
    stop = threading.Event()
    errors: list[BaseException] = []

    def guard(body):  # type: ignore[no-untyped-def]
        def run() -> None:
            rng = random.Random(threading.get_ident())
            try:
                while not stop.is_set():
                    body(rng)
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        return threading.Thread(target=run)

    def reader(rng: random.Random) -> None:
        i = rng.randrange(len(paths))
        assert cache.pread(paths[i], rng.randrange(4000), 16) == bytes([i]) * 16, "read another file's bytes"

    def forgetter(rng: random.Random) -> None:
        cache.forget(paths[rng.randrange(len(paths))])

    def appender(rng: random.Random) -> None:  # opens and closes descriptors, as index.log swaps do
        log = AppendFile(tmp_path / f"log-{rng.randrange(4)}", fsync_each=False)
        for _ in range(20):
            log.append(b"x" * 32)
        log.close()

    threads = [guard(reader), guard(reader), guard(forgetter), guard(appender), guard(lambda _rng: cache.close())]
    for t in threads:
        t.start()
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join()
    cache.close()
    assert not errors, errors[0]

"""A real kill -9 of a process appending to a frontier file leaves a readable prefix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from crawlstream.frontier import FileState, FrontierFiles

_WRITER = """
import sys
from pathlib import Path
from crawlstream.frontier import FileState, FrontierEntry, FrontierFiles
files = FrontierFiles(Path(sys.argv[1]))
state = FileState()
i = 0
while True:
    batch = [
        FrontierEntry("kill.example", f"https://kill.example/{j}\\n" + "x" * (j % 700), j)
        for j in range(i, i + 50)
    ]
    state = files.append(0, "kill.example", batch, state)
    i += 50
    if i == 500:
        print("ready", flush=True)
"""


def test_kill_9_mid_append_leaves_a_whole_ordered_prefix(tmp_path: Path) -> None:
    root = tmp_path / "frontier"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        assert time.monotonic() < deadline
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    files = FrontierFiles(root)
    state = files.reconcile(0, "kill.example", FileState())  # Redis knew nothing yet
    keys = [e.url_key for e, _ in files.read(0, "kill.example", state, limit=10_000_000)]
    assert len(keys) >= 500
    assert keys == list(range(len(keys)))
    assert files.path_for(0, "kill.example").stat().st_size == state.size

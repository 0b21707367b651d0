"""``crawlstream replay --into DIR``: rebuild the Parquet lake and the URL index from the topics.

Reads ``content.stored`` and ``urls.records`` (the replay sources, kept forever: ADR 011) from
the configured bus (the embedded log in ``--data-dir``, or Kafka when
``KAFKA_BOOTSTRAP_SERVERS`` is set) with a fresh consumer group, from their first offset to
the end they had when the replay began, through the Parquet sink's own handler into
``DIR/lake``, then builds the index in ``DIR/index``. ``crawlstream serve --data-dir DIR``
then answers from it. Undecodable messages are dead-lettered as the sink would; the replay
goes on. Interrupted (Ctrl-C, kill -9), it resumes when run again with the same ``--into``.

The content store is not rebuilt: its segments are its source of truth and carry every
record's URL, so ``crawlstream store rebuild-index`` rebuilds its url index in place.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register", "run"]

logger = logging.getLogger(__name__)

_PROGRESS_INTERVAL_S = 1.0
BATCH_SIZE = 5000  # events per poll of the replay loop


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus", "lake", "index", "metrics")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from crawlstream.topics import CONTENT_STORED, URLS_RECORDS

    p = sub.add_parser(
        "replay",
        parents=[common],
        help="rebuild the lake and the URL index into an empty DIR by replaying content.stored and urls.records",
    )
    p.add_argument("--into", type=Path, required=True, metavar="DIR", help="empty directory (or one to resume)")
    p.add_argument(
        "--topics",
        nargs="+",
        default=[CONTENT_STORED, URLS_RECORDS],
        metavar="TOPIC",
        help=f"replay sources to read (default: {CONTENT_STORED} {URLS_RECORDS})",
    )
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start an interrupted replay in DIR over from the first offset instead of resuming it",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.replay import check_retained, prepare_target
    from crawlstream.runtime import open_host

    into: Path = args.into.resolve()
    if into == settings.data_dir.resolve():
        from crawlstream.errors import ConfigError

        raise ConfigError(f"--into {into} is the data dir replay reads from; give another directory")
    stop = {"requested": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with open_host(settings) as host:
        check_retained({t: host.bus.start_offsets(t) for t in args.topics})  # before DIR is touched
        state, resumed = prepare_target(into, args.topics, from_beginning=args.from_beginning)
        summary = _replay(host, into, state, resumed, lambda: stop["requested"], sys.stderr)
    sys.stdout.write(json.dumps(summary) + "\n")
    return 130 if summary["interrupted"] else 0


def replay_into(
    settings: Settings,
    into: Path,
    state: Any,
    *,
    resumed: bool = False,
    should_stop: Any = lambda: False,
    progress_out: Any = None,
) -> dict[str, Any]:
    """Replay ``state.topics`` into ``into`` (see the module docstring); the JSON summary.
    Refuses topics whose beginning retention deleted, as the command does."""
    from crawlstream.replay import check_retained
    from crawlstream.runtime import open_host

    with open_host(settings) as host:
        check_retained({t: host.bus.start_offsets(t) for t in state.topics})
        return _replay(host, into, state, resumed, should_stop, progress_out or sys.stderr)


def _replay(host: Any, into: Path, state: Any, resumed: bool, should_stop: Any, out: Any) -> dict[str, Any]:
    from crawlstream.bus import TopicPartition
    from crawlstream.index import IndexBuilder
    from crawlstream.lake._staging import StagingLog
    from crawlstream.lake.service import SinkHandler
    from crawlstream.replay import ReplayProgress

    target = dataclasses.replace(host.settings, data_dir=into)
    started = time.monotonic()
    bus = host.bus
    topics = list(state.topics)
    ends = {TopicPartition(t, p): end for t in topics for p, end in enumerate(bus.end_offsets(t))}
    consumer = bus.consumer(state.group)
    committed = {tp: off or 0 for tp, off in consumer.committed(ends).items()}
    progress = ReplayProgress(total=sum(ends.values()), done_before=sum(committed.values()))
    progress.update(progress.done_before)

    staging = StagingLog(into / "parquet-sink" / "staging" / "replay")
    handler = SinkHandler.from_settings(target, staging, skip_in_lake=False)
    handler.recover()  # rows an interrupted run had staged but not published
    loop = host.service_loop("replay", state.group, topics, handler, consumer=consumer, batch_size=BATCH_SIZE)
    interrupted = False
    last_report = 0.0
    try:
        while True:
            if should_stop():
                interrupted = True
                break
            loop.run_once()
            now = time.monotonic()
            if now - last_report >= _PROGRESS_INTERVAL_S:  # the first iteration reports at once
                last_report = now
                done = consumer.committed(ends)
                progress.update(sum(min(off or 0, ends[tp]) for tp, off in done.items()))
                out.write(progress.line() + "\n")
                out.flush()
                if _reached(done, ends):
                    break
    finally:
        loop.close()
        handler.flush()
        staging.close()
    dead = loop.metrics.dead_lettered
    dead_lettered = int(
        sum(sample.value for metric in dead.collect() for sample in metric.samples if sample.name.endswith("_total"))
    )
    progress.update(progress.total if not interrupted else progress.done)
    out.write(progress.line() + "\n")
    summary: dict[str, Any] = {
        "into": str(into),
        "group": state.group,
        "topics": topics,
        "resumed": resumed,
        "events": progress.total,
        "dead_lettered": dead_lettered,
        "interrupted": interrupted,
    }
    if interrupted:
        summary["seconds"] = round(time.monotonic() - started, 3)
        out.write(f"replay interrupted: run the same command again to resume ({into})\n")
        return summary
    build = IndexBuilder.from_settings(target).build()
    state.done, state.events = True, progress.total
    state.save(into)
    seconds = time.monotonic() - started
    summary.update(
        index=build.to_json(),
        seconds=round(seconds, 3),
        events_per_s=round(progress.total / seconds) if seconds > 0 else None,
    )
    return summary


def _reached(committed: dict[Any, int | None], ends: dict[Any, int]) -> bool:
    return all((committed.get(tp) or 0) >= end for tp, end in ends.items())

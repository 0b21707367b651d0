"""``crawlstream spark-ingest INPUT... --dataset-id N``: ``crawlstream ingest`` as an Apache Spark job.

Same inputs, same lake files' layout and content, same rejects and JSON summary, same exit
codes as ``crawlstream ingest`` (0; 1 an input cannot be read as a whole, nothing written; 3 a
file damaged part-way). The rows are not sent to ``urls.records``: such a dataset is rebuilt by
running the job again, not by ``crawlstream replay``. Needs the ``spark`` extra (pyspark); see
``crawlstream.ingest.spark`` and docs/decisions/030-spark-ingest.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from crawlstream.cli._ingest import add_input_arguments, report
from crawlstream.durable import write_atomically
from crawlstream.errors import ConfigError
from crawlstream.objectstore import lake_location, parse_location
from crawlstream.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


SETTINGS_SECTIONS: tuple[str, ...] | None = ("lake", "s3")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "spark-ingest",
        parents=[common],
        help="import URL files into the lake with Apache Spark (the lake `ingest` writes; no urls.records)",
        epilog=(
            "Writes the lake files `crawlstream ingest` writes (same rows, layout and rejects), named after the "
            "job (dataset id + the inputs' path, size and mtime): running the same command again after a crash "
            "overwrites them, so no row is counted twice. The rows are NOT sent to urls.records: rebuild a "
            "Spark-ingested dataset by running the job again, not with `crawlstream replay`. Rejected rows go "
            "to <lake>/rejects/dataset_id=N/<file>.jsonl. Exit status: 0 imported; 1 an input cannot be read "
            "at all (nothing written); 3 imported, but a file was damaged part-way. Under spark-submit: "
            "spark-submit libs/crawlstream/ingest/spark.py INPUT... --dataset-id N."
        ),
    )
    add_input_arguments(p, metavar="INPUT")
    p.add_argument("--lake", default=None, metavar="URI",
                   help="the lake: a directory every executor sees, or s3://bucket/prefix (default: lake.uri, "
                        "else the data dir)")
    p.add_argument("--master", default=None,
                   help="Spark master: local[*] (the default outside spark-submit), spark://HOST:PORT, k8s://...")
    p.add_argument("--partitions", type=int, default=0,
                   help="tasks that sort and write the lake files (0: 4 per core, at most 256)")
    p.set_defaults(func=run)


_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> Path:
    """A log4j2 configuration printing errors only (Spark's default prints a page at start)."""
    path = Path(tempfile.gettempdir()) / "crawlstream-spark-log4j2.properties"
    if not path.is_file() or path.read_text() != _QUIET_LOG4J:
        write_atomically(path, _QUIET_LOG4J.encode(), fsync=False)  # another run may read it at once
    return path


@contextmanager
def spark_session(master: str | None, app_name: str = "crawlstream-spark-ingest") -> Iterator[SparkSession]:
    """A quiet Spark session: no UI, executors on this Python, a local driver on loopback only.
    ``master`` None: spark-submit's, else ``local[*]``."""
    try:
        from pyspark.sql import SparkSession
    except ModuleNotFoundError as exc:
        raise ConfigError("spark-ingest needs pyspark: pip install 'crawlstream[spark]'") from exc
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver
    if master is None and not under_submit:
        master = "local[*]"
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if not under_submit:  # this process starts the JVM: its workers run this Python, quietly
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read by pyspark when the context starts
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_quiet_log4j()}")
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else it warns that the host name is loopback
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "ERROR")
               .config("spark.speculation", "false")  # two attempts of a task would write the same keys
               .config("spark.python.worker.reuse", "true"))
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.ingest.spark import plan_job, run_job

    lake = parse_location(args.lake, setting="--lake") if args.lake else lake_location(settings)
    job = plan_job(
        args.files,
        args.dataset_id,
        lake=lake,
        s3=settings.s3,
        config=settings.lake,
        fmt=args.format,
        url_field=args.url_field,
        ts_field=args.ts_field,
        keep_extras=not args.no_extras,
        rejects=None if args.no_rejects else lake,
    )
    started = time.perf_counter()
    with spark_session(args.master) as session:
        session_s = time.perf_counter() - started
        stats = run_job(session.sparkContext, job, partitions=args.partitions)
    summary = stats.to_json()
    summary.update({"job_id": job.job_id, "lake": str(lake), "spark_session_seconds": round(session_s, 3)})
    return report(summary, stats.damaged)

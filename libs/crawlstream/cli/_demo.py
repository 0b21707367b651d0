"""``crawlstream demo`` (what ``make run`` runs): the whole system on the embedded default.

1. start the synthetic web (``crawlstream.devtools.demoweb``) on 127.0.0.1: many registered domains
   with robots rules, crawl delays, redirects, errors, slow, huge and binary pages;
2. crawl it to the end with every pipeline service in this process (embedded log, private
   Redis, content store, Parquet lake), exactly as ``crawlstream run --exit-when-done``;
3. build the index over the lake;
4. print the crawl summary and a few answers read back through the index;
5. serve the query API until Ctrl-C (``--no-serve`` to stop after step 4).

Running it again with the same data dir resumes (nothing is fetched twice) and re-indexes.
The demo web lives on loopback, so this command turns ``--allow-private-networks`` on and
maps the demo hosts to it; nothing else leaves the machine. It also caps the robots.txt-error
and 429/503 back-offs at 5 s so the run drains in about a minute.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
from typing import Any

from crawlstream.settings import Settings

logger = logging.getLogger(__name__)

_DEMO_BACKOFF_S = 5.0


# The settings sections `--help` lists (crawlstream.cli._help): None = every one.
SETTINGS_SECTIONS: tuple[str, ...] | None = None


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="the main job: crawl the built-in synthetic web, index it and serve the query API",
    )
    p.add_argument("--domains", type=int, default=40, help="registered domains in the synthetic web")
    p.add_argument("--pages-per-domain", type=int, default=8, help="pages per domain")
    p.add_argument("--no-serve", action="store_true", help="exit after indexing instead of serving the API")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import check_port_free, serve, tokens_from_settings
    from crawlstream.cli._run import log_to_data_dir, open_run_host, run_crawl
    from crawlstream.devtools.demoweb import DemoWeb
    from crawlstream.index import IndexBuilder, IndexReader
    from crawlstream.urls import registered_domain_or_host

    if args.domains < 1 or args.pages_per_domain < 3:
        raise SystemExit("crawlstream demo: --domains must be >= 1 and --pages-per-domain >= 3")
    if not args.no_serve:
        check_port_free(settings.api.host, settings.api.port)  # before the crawl, not after it
    log_file = log_to_data_dir(args, settings, "demo")
    if not args.no_serve:
        tokens, anonymous_reads = tokens_from_settings(settings)
    # The demo web is on loopback, and its robots.txt 5xx / 503 pages would otherwise hold
    # the run for the production back-offs (minutes): cap them so the demo drains promptly.
    settings = dataclasses.replace(
        settings,
        fetch=dataclasses.replace(
            settings.fetch,
            allow_private_networks=True,
            robots_error_backoff_s=min(settings.fetch.robots_error_backoff_s, _DEMO_BACKOFF_S),
        ),
        scheduler=dataclasses.replace(
            settings.scheduler, max_backoff_s=min(settings.scheduler.max_backoff_s, _DEMO_BACKOFF_S)
        ),
        api=dataclasses.replace(settings.api, serve_content=True),
    )
    with DemoWeb(args.domains, pages_per_domain=args.pages_per_domain) as web:
        logger.info("demo web: %d domains on 127.0.0.1:%d", args.domains, web.port)
        with open_run_host(settings) as host:

            def on_signal(signum: int, frame: Any) -> None:
                host.stop_event.set()

            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)
            summary = run_crawl(
                host, web.seed_urls(), exit_when_done=True, resolve_map=web.resolve_map, log_file=log_file
            )
            interrupted = host.stop_event.is_set() and summary.reason == "stopped"
        sample_domains = sorted({registered_domain_or_host(h) for h in web.hosts})[:3]
    sys.stderr.write(summary.to_text() + "\n")
    sys.stdout.write(summary.to_line() + "\n")
    if interrupted:
        return 130

    build = IndexBuilder.from_settings(settings).build()
    sys.stdout.write(json.dumps({"index": build.to_json()}, default=str) + "\n")
    reader = IndexReader.from_settings(settings)
    try:
        sys.stdout.write(json.dumps({"sample": _sample_answers(reader, settings, sample_domains)}, default=str) + "\n")
    finally:
        reader.close()
    sys.stdout.flush()
    if args.no_serve:
        return 0
    base = f"http://{settings.api.host}:{settings.api.port}"
    sys.stderr.write(
        f"query API on {base}  (Ctrl-C to stop)\n"
        f"  curl {base}/v1/domain/<domain>\n"
        f"  curl '{base}/v1/domain/<domain>/datasets/{settings.crawl.dataset_id}/urls?limit=10'\n"
        f"  curl '{base}/v1/url?url=<url>'   curl {base}/openapi.json\n"
        f"reads are {'open on loopback' if anonymous_reads else 'by token'}; deletes need a token with the delete "
        f"right: {tokens.path} (crawlstream tokens --help)\n"
    )
    return serve(settings)


def _sample_answers(reader: Any, settings: Settings, domains: list[str]) -> dict[str, Any]:
    """A few answers of the two main queries, read back through the freshly built index."""
    from crawlstream.lake import ALIAS_DATASETS

    with reader.pin() as index:
        out: dict[str, Any] = {"index_version": index.version, "domains": index.domain_count()}
        answers: list[dict[str, Any]] = []
        for domain in domains:
            # None: a crawl stopped early (crawl.max_pages) may not have reached the domain.
            # The alias rows (redirects, raw forms: ADR 024) are not a dataset users query.
            known = index.datasets_for_domain(domain) or []
            datasets = [d for d in known if d.dataset_id not in ALIAS_DATASETS]
            if not datasets:
                answers.append({"domain": domain, "datasets": []})
                continue
            page = index.urls(domain, settings.crawl.dataset_id, 0, 3)
            answers.append(
                {
                    "domain": domain,
                    "datasets": [d._asdict() for d in datasets],
                    "first_urls": [item.url for item in page.items],
                    "total": page.total,
                }
            )
        out["answers"] = answers
    return out

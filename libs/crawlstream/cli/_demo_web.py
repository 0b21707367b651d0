"""``crawlstream demo-web``: serve the synthetic web on loopback until Ctrl-C.

Crawl it either through ``--http-proxy http://127.0.0.1:PORT`` (the server answers proxy
requests for its own hosts) or with the resolver map it writes (``--resolve-map-out``, then
``CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE``) plus ``--allow-private-networks`` (the server is on
127.0.0.1, which the SSRF guard blocks by default).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from crawlstream.settings import Settings

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ()


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("demo-web", parents=[common], help="serve a synthetic multi-domain web on 127.0.0.1")
    p.add_argument("--domains", type=int, default=100, help="registered domains to serve (default 100)")
    p.add_argument("--pages-per-domain", type=int, default=20, help="pages on each domain's main host")
    p.add_argument("--seed", type=int, default=0, help="everything is deterministic from this seed")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    p.add_argument("--slow-s", type=float, default=30.0, help="how long /slow pages take to answer")
    p.add_argument("--resolve-map-out", type=Path, help="write {host: [ip, port]} JSON for the fetcher here")
    p.add_argument("--seeds-out", type=Path, help="write the seed URLs (one per line) here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.devtools.demoweb import DemoWeb  # a dev tool: loaded only by this command

    web = DemoWeb(
        args.domains, pages_per_domain=args.pages_per_domain, seed=args.seed, port=args.port, slow_s=args.slow_s
    )
    web.start()
    try:
        if args.resolve_map_out:
            args.resolve_map_out.write_text(json.dumps(web.resolve_map, indent=1) + "\n", encoding="utf-8")
        if args.seeds_out:
            args.seeds_out.write_text("".join(u + "\n" for u in web.seed_urls()), encoding="utf-8")
        sys.stdout.write(
            f"demo web: {args.domains} domains, {len(web.hosts)} hosts on 127.0.0.1:{web.port} "
            f"(e.g. http://{web.hosts[0]}/); reach it with --http-proxy {web.proxy_url} or the resolver map "
            "plus --allow-private-networks; Ctrl-C to stop\n"
        )
        sys.stdout.flush()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        web.stop()
    return 0

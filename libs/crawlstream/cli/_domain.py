"""``crawlstream domain set|show|clear``: per-domain politeness overrides at run time.

``set D --delay S --max-in-flight N --page-budget N`` replaces, for domain D only, the
scheduler's ``min_delay_s``, ``max_in_flight_per_domain`` and ``max_pages_per_domain``
(robots Crawl-delay and back-off still lengthen the delay). Every scheduler sharing the Redis
reads the override at its next claim (its loop runs at least every 0.1 s): a longer delay holds
the domain from that claim on, counted from its last request; a shorter one applies from the
domain's next request. ``clear D`` goes back to the settings; ``show [D...]`` prints the
overrides, the exclusion and each partition's scheduling state. ADR 016.

Who may run it: as ``crawlstream exclude`` (the Redis' file permissions or ``REDIS_URL``);
never exposed over HTTP.
"""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.cli._exclude import controls, domain_of
from crawlstream.errors import ConfigError
from crawlstream.politeness import DomainOverride, Scheduler
from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("scheduler",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("domain", help="per-domain overrides of delay, max in flight and page budget at run time")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("set", parents=[common], help="override settings for one domain (merged with earlier ones)")
    s.add_argument("domain", metavar="DOMAIN")
    s.add_argument("--delay", type=float, metavar="S", help="seconds between two requests (replaces min_delay_s)")
    s.add_argument("--max-in-flight", type=int, metavar="N", help="concurrent requests")
    s.add_argument("--page-budget", type=int, metavar="N", help="pages dispatched to the domain at most")
    s.set_defaults(func=run_set)
    w = actions.add_parser("show", parents=[common], help="overrides, exclusion and scheduling state (JSON)")
    w.add_argument("domains", nargs="*", metavar="DOMAIN", help="default: every overridden or excluded domain")
    w.set_defaults(func=run_show)
    c = actions.add_parser("clear", parents=[common], help="drop the overrides of domains")
    c.add_argument("domains", nargs="+", metavar="DOMAIN")
    c.set_defaults(func=run_clear)


def run_set(args: argparse.Namespace, settings: Settings) -> int:
    if args.delay is None and args.max_in_flight is None and args.page_budget is None:
        raise ConfigError("domain set: give --delay, --max-in-flight and/or --page-budget")
    if args.delay is not None and not 0 <= args.delay <= 86_400:
        raise ConfigError(f"--delay {args.delay:g}: give 0 to 86400 seconds")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        raise ConfigError(f"--max-in-flight {args.max_in_flight}: give 1 or more")
    if args.page_budget is not None and args.page_budget < 0:
        raise ConfigError(f"--page-budget {args.page_budget}: give 0 or more")
    domain = domain_of(args.domain)
    with controls(settings) as (ctl, _):
        merged = ctl.set_override(domain, DomainOverride(args.delay, args.max_in_flight, args.page_budget))
    _print({"domain": domain, "override": merged.to_json()})
    return 0


def run_clear(args: argparse.Namespace, settings: Settings) -> int:
    domains = list(dict.fromkeys(domain_of(d) for d in args.domains))
    with controls(settings) as (ctl, _):
        cleared = [d for d in domains if ctl.clear_override(d)]
    _print({"cleared": cleared})
    return 0


def run_show(args: argparse.Namespace, settings: Settings) -> int:
    with controls(settings) as (ctl, _):
        excluded = set(ctl.excluded())
        domains = (
            list(dict.fromkeys(domain_of(d) for d in args.domains))
            if args.domains
            else sorted(excluded | set(ctl.overridden()))
        )
        scheduler = Scheduler.from_settings(settings, ctl.redis)
        for domain in domains:
            override = ctl.override(domain)
            states = [scheduler.domain_state(p, domain) for p in ctl.partitions_of(domain)]
            _print(
                {
                    "domain": domain,
                    "excluded": domain in excluded,
                    "override": None if override is None else override.to_json(),
                    "state": [str(s) for s in states],
                }
            )
    return 0


def _print(line: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()

"""``crawlstream exclude`` / ``crawlstream include``: stop or resume crawling domains at run time.

The excluded set lives in the scheduler's Redis (``REDIS_URL``, or the embedded server of the
data dir, joined without stopping a running ``crawlstream run``), so every scheduler stops
releasing the domains at its next claim and every fetcher skips requests of them released
before. ``exclude`` then waits until the domains have no request in flight (``--wait-s``), so
once it returns the domains receive no request from this crawl. Their URLs stay parked in the
frontier: ``include`` (or ``exclude --remove``) resumes them. ADR 016.

Who may run it: whoever can write to the Redis, i.e. the data dir's socket with the user's own
file permissions, or holders of ``REDIS_URL``. It is never exposed over HTTP.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis

from crawlstream.errors import ConfigError, InvalidUrl, RedisUnavailable
from crawlstream.politeness import Controls
from crawlstream.redisconn import RedisHandle, attach_redis
from crawlstream.settings import Settings
from crawlstream.urls import canonicalize

__all__ = ["SETTINGS_SECTIONS", "controls", "domain_of", "register"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ()


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "exclude",
        parents=[common],
        help="exclude domains from the running crawl at once (their URLs are parked); --remove to include again",
    )
    p.add_argument("domains", nargs="*", metavar="DOMAIN", help="registered domains (a host or URL names its domain)")
    p.add_argument("--remove", action="store_true", help="include the domains again (same as `include`)")
    p.add_argument("--list", action="store_true", help="print the excluded domains")
    p.add_argument(
        "--wait-s",
        type=float,
        default=60.0,
        metavar="S",
        help="wait up to S seconds for the domains' requests in flight to be answered (default: %(default)s; "
        "0 = do not wait); exit 1 if some still are",
    )
    p.set_defaults(func=run_exclude)
    q = sub.add_parser("include", parents=[common], help="include excluded domains again; their parked URLs resume")
    q.add_argument("domains", nargs="+", metavar="DOMAIN")
    q.set_defaults(func=run_include)


def domain_of(text: str) -> str:
    """The registered domain named by ``text``: a domain, a host or a URL."""
    value = text.strip()
    try:
        return canonicalize(value if "://" in value else f"http://{value}/").domain
    except InvalidUrl as exc:
        raise ConfigError(f"{text!r} names no domain ({exc})") from exc


@contextmanager
def controls(settings: Settings) -> Iterator[tuple[Controls, RedisHandle]]:
    """The controls of the crawl on ``settings``' Redis, which is left running."""
    try:
        with attach_redis(settings.redis_url, settings.data_dir) as handle:
            yield Controls(handle.client), handle
    except redis.RedisError as exc:
        raise RedisUnavailable(f"the scheduler's Redis did not answer ({exc})") from exc


def _domains(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(domain_of(n) for n in names))


def run_exclude(args: argparse.Namespace, settings: Settings) -> int:
    if args.remove:
        return run_include(args, settings)
    domains = _domains(args.domains)
    with controls(settings) as (ctl, handle):
        if args.list or not domains:
            _print({"excluded": ctl.excluded()})
            return 0
        added = ctl.exclude(domains)
        if handle.embedded:  # we started the data dir's Redis: no crawl runs there, nothing is in flight
            left = 0
        elif args.wait_s > 0:
            left = ctl.wait_idle(domains, args.wait_s)
        else:
            left = ctl.in_flight(domains)
    _print({"excluded": domains, "added": added, "in_flight": left})
    if left and args.wait_s > 0:
        sys.stderr.write(
            f"crawlstream exclude: {left} request(s) of {', '.join(domains)} still in flight after "
            f"{args.wait_s:g} s (a stopped scheduler's tickets wait for their lease): they may still be fetched\n"
        )
        return 1
    return 0


def run_include(args: argparse.Namespace, settings: Settings) -> int:
    domains = _domains(args.domains)
    with controls(settings) as (ctl, _):
        removed = ctl.include(domains)
    _print({"included": domains, "removed": removed})
    return 0


def _print(line: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()

"""`crawlstream <command> --help` puts the command's own options first and the ~100 settings
flags after them, grouped by section, listing only the sections the command reads; the other
settings flags are left out of the help but still parsed (crawlstream.cli._help)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re

import pytest

from crawlstream.cli import _COMMANDS, _parser
from crawlstream.cli._help import CommandParser
from crawlstream.settings import GENERAL, Settings, iter_specs, load

SECTIONS = {spec.section for spec in iter_specs(Settings)}


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        _parser().parse_args([*argv, "--help"])
    return out.getvalue()


def _first_setting_flag(text: str) -> int:
    flags = [spec.flag for spec in iter_specs(Settings)]
    return min(m.start() for f in flags for m in re.finditer(re.escape(f) + r"\b", text))


@pytest.mark.parametrize(
    ("argv", "own"),
    [
        (("local-kafka",), ["--brokers", "--partitions", "--no-topics"]),
        (("ingest",), ["--dataset-id", "--format", "--url-field", "--no-publish"]),
        (("run",), ["--seeds", "--exit-when-done", "--services"]),
        (("store", "tag"), ["--remove"]),
    ],
)
def test_a_commands_own_options_come_before_any_settings_flag(argv: tuple[str, ...], own: list[str]) -> None:
    text = _help(*argv)
    first_setting = _first_setting_flag(text)
    for option in own:
        assert text.index(option) < first_setting, (option, text[:2000])
    usage = text[: text.index("\n\n")]
    assert "--data-dir" not in usage and "--<section>-<name> VALUE" in usage  # a short usage line
    assert len(usage.splitlines()) <= 6, usage


def test_settings_are_grouped_by_section_and_only_the_relevant_ones_are_listed() -> None:
    text = _help("local-kafka")
    assert "settings: general:" in text and "settings: bus:" in text
    assert text.index("settings: general:") < text.index("settings: bus:")
    assert "--bus-partitions" in text and "--fetch-timeout-s" not in text and "settings: fetch" not in text
    hint = " ".join(text[text.index("Not listed here") :].split())
    assert "crawlstream settings --markdown" in hint and "fetch" in hint and "bus," not in hint
    assert len(text.splitlines()) < 150  # it was ~600 lines


def test_commands_that_read_every_section_list_them_all() -> None:
    text = _help("run")
    for section in SECTIONS:
        assert f"settings: {section}:" in text, section
    assert "Not listed here" not in text


def test_a_flag_left_out_of_the_help_still_parses() -> None:
    args = _parser().parse_args(["local-kafka", "--fetch-timeout-s", "3", "--store-zstd-level", "5"])
    settings = load({}, args)
    assert settings.fetch.timeout_s == 3.0 and settings.store.zstd_level == 5
    args = _parser().parse_args(["tokens", "list", "--scheduler-min-delay-s", "0.5", "--no-crawl-sitemaps"])
    assert load({}, args).scheduler.min_delay_s == 0.5 and load({}, args).crawl.sitemaps is False


def test_every_command_declares_sections_that_exist() -> None:
    import importlib

    for name in _COMMANDS:
        declared = importlib.import_module(f"crawlstream.cli.{name}").SETTINGS_SECTIONS
        assert declared is None or set(declared) <= SECTIONS - {GENERAL}, (name, declared)


def test_every_parser_is_a_command_parser() -> None:
    def walk(parser: argparse.ArgumentParser) -> int:
        assert isinstance(parser, CommandParser)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return 1 + sum(walk(p) for a in subs for p in a.choices.values())

    assert walk(_parser()) > len(_COMMANDS)

"""``crawlstream <command> --help``: the command's own options first, then the settings it reads.

Every command accepts every setting as a flag (``--<section>-<name>``, ~100 of them, from
``crawlstream.settings``). Listed in full they buried a command's own few options, and its
usage line ran for a hundred lines. So a command's help shows, in this order: its usage with
its own options (then ``[--<section>-<name> VALUE]`` for the settings), its own options, the
``settings: general`` group and the groups of the sections it reads (its module's
``SETTINGS_SECTIONS``; None = every section), then one line naming the sections left out.

Only the help changes: every flag is still parsed on every command that accepts settings.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence

from crawlstream.settings import GENERAL, SETTINGS_GROUP_PREFIX

__all__ = ["CommandParser", "show_sections"]

# Stands in for the settings flags in a usage line (never added to a parser).
_SETTINGS_USAGE = argparse.Action(["--<section>-<name>"], dest=argparse.SUPPRESS, metavar="VALUE")


def _section(group: argparse._ArgumentGroup) -> str | None:
    """The settings section an argument group holds, or None for the command's own groups."""
    title = group.title or ""
    return title.removeprefix(SETTINGS_GROUP_PREFIX) if title.startswith(SETTINGS_GROUP_PREFIX) else None


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help puts the settings flags after the command's own options
    and lists only the sections in ``settings_sections`` (None: all). Sub-parsers made by
    ``add_subparsers`` are of this class too."""

    settings_sections: frozenset[str] | None = None

    def _shows(self, section: str) -> bool:
        return section == GENERAL or self.settings_sections is None or section in self.settings_sections

    def _settings_groups(self) -> dict[str, argparse._ArgumentGroup]:
        """The argument groups of settings flags, by section."""
        return {section: g for g in self._action_groups if (section := _section(g)) is not None}

    def _usage_actions(self) -> list[argparse.Action]:
        settings = {id(a) for g in self._settings_groups().values() for a in g._group_actions}
        own = [a for a in self._actions if id(a) not in settings]
        return [*own, _SETTINGS_USAGE] if settings else own

    def format_usage(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._usage_actions(), self._mutually_exclusive_groups)
        return formatter.format_help()

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._usage_actions(), self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        sections = self._settings_groups()
        own = [g for g in self._action_groups if _section(g) is None]
        shown = [g for section, g in sections.items() if self._shows(section)]
        hidden = [section for section in sections if not self._shows(section)]
        for group in own + shown:
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
        if hidden:
            formatter.add_text(
                f"Not listed here (this command does not read them): the settings of {', '.join(hidden)}. "
                "Every setting has a flag, --<section>-<name> for most: "
                "`crawlstream settings --markdown` lists them all."
            )
        formatter.add_text(self.epilog)
        return formatter.format_help()

def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name the same parser
                yield from _parsers(sub)


def show_sections(parsers: Iterable[argparse.ArgumentParser], sections: Sequence[str] | None) -> None:
    """The help of ``parsers`` and their sub-parsers lists the settings of ``sections`` (None: all)."""
    shown = None if sections is None else frozenset(sections)
    for parser in parsers:
        for p in _parsers(parser):
            if isinstance(p, CommandParser):
                p.settings_sections = shown

"""The machinery behind ``Settings``: typed fields that know their env variable and flag.

A setting is a dataclass field declared with :func:`setting`. Each one is reachable three
ways, in this order of precedence: a CLI flag, an environment variable, the default.
Top-level fields use ``CRAWLSTREAM_<NAME>`` / ``--<name>``; fields of a section use
``CRAWLSTREAM_<SECTION>_<NAME>`` / ``--<section>-<name>``; the design's fixed variables
(``KAFKA_BOOTSTRAP_SERVERS``...) and a few user-facing flags (``--max-pages``) override
the derived names explicitly. Invalid values raise ``ConfigError`` naming the variable.

Nothing below the entry point reads ``os.environ``: the CLI passes it in here once.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from crawlstream.errors import ConfigError

T = TypeVar("T")

# The section of the top-level settings (data dir, Kafka, Redis, logging...), and how the
# argument group of a section's flags is titled in a command's --help ("settings: fetch").
GENERAL = "general"
SETTINGS_GROUP_PREFIX = "settings: "

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def setting(
    default: Any,
    help: str,
    *,
    env: str | None = None,
    flag: str | None = None,
    secret: bool = False,
    check: Callable[[Any], str | None] | None = None,
) -> Any:
    """Declare a setting. ``check`` returns an error text (what is expected) or None."""
    metadata = {"help": help, "env": env, "flag": flag, "secret": secret, "check": check}
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple for sequence defaults (settings are frozen)")
    return dataclasses.field(default=default, metadata=metadata)


def positive(value: Any) -> str | None:
    return None if value > 0 else "a number > 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "a number >= 0"


def between(low: int, high: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"a number from {low} to {high}"

    return check


def one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else "one of " + ", ".join(choices)

    return check


@dataclasses.dataclass(frozen=True)
class Spec:
    """One setting, flattened: where it lives in the tree and how a user names it."""

    path: tuple[str, ...]  # ("fetch", "timeout_s") or ("data_dir",)
    type: Any
    default: Any
    help: str
    env: str
    flag: str
    secret: bool
    check: Callable[[Any], str | None] | None

    @property
    def dest(self) -> str:
        return "__".join(self.path)

    @property
    def section(self) -> str:
        """The section the setting belongs to ("fetch"), or ``GENERAL`` for a top-level one."""
        return self.path[0] if len(self.path) > 1 else GENERAL


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def iter_specs(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[Spec]:
    """Every leaf setting of ``cls`` (sections recursed), in declaration order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = (*prefix, f.name)
        if _is_section(tp):
            yield from iter_specs(tp, path)
            continue
        name = "_".join(path)
        yield Spec(
            path=path,
            type=tp,
            default=f.default,
            help=f.metadata.get("help", ""),
            env=f.metadata.get("env") or f"CRAWLSTREAM_{name.upper()}",
            flag=f.metadata.get("flag") or "--" + name.replace("_", "-"),
            secret=bool(f.metadata.get("secret")),
            check=f.metadata.get("check"),
        )


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported setting type {tp!r}")
        return args[0], True
    return tp, False


def parse_value(spec: Spec, raw: str | Sequence[str], source: str) -> Any:
    """Convert a flag or env string into the setting's type, or raise ConfigError."""
    tp, optional = _base_type(spec.type)
    try:
        if typing.get_origin(tp) is tuple:
            (item_tp, _ellipsis) = typing.get_args(tp)
            items = raw if not isinstance(raw, str) else [s for s in raw.split(",") if s.strip()]
            return tuple(item_tp(s.strip()) for s in items)
        assert isinstance(raw, str)
        if optional and raw.strip() == "":
            return None
        if tp is bool:
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError("expected one of 1/0, true/false, yes/no, on/off")
        if tp is Path:
            return Path(raw)
        return tp(raw.strip())
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: cannot read {raw!r} as {getattr(tp, '__name__', tp)} ({exc})") from exc


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per setting of ``cls``; unset flags stay None so env/defaults apply.

    The flags go in one argument group per section, titled ``SETTINGS_GROUP_PREFIX`` + the
    section (``settings: general`` first, for the top-level settings).
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in iter_specs(cls):
        group = groups.get(spec.section)
        if group is None:
            description = "each setting: flag > environment > default" if spec.section == GENERAL else None
            group = groups[spec.section] = parser.add_argument_group(
                SETTINGS_GROUP_PREFIX + spec.section, description
            )
        tp, _ = _base_type(spec.type)
        shown = "<secret>" if spec.secret else spec.default
        # argparse %-formats help texts: a literal "%" (as in "hh % shards") must be doubled.
        help_text = f"{spec.help} [env {spec.env}; default {shown}]".replace("%", "%%")
        if tp is bool:
            group.add_argument(
                spec.flag,
                dest=spec.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        elif typing.get_origin(tp) is tuple:
            group.add_argument(spec.flag, dest=spec.dest, action="append", default=None, help=help_text)
        else:
            group.add_argument(spec.flag, dest=spec.dest, default=None, help=help_text, metavar="VALUE")


def build(
    cls: type[T],
    environ: Mapping[str, str],
    flags: argparse.Namespace | Mapping[str, Any] | None = None,
) -> T:
    """Build a frozen ``cls`` from flags (already parsed), then ``environ``, then defaults."""
    given = vars(flags) if isinstance(flags, argparse.Namespace) else dict(flags or {})
    values: dict[tuple[str, ...], Any] = {}
    for spec in iter_specs(cls):
        flag_value = given.get(spec.dest)
        if flag_value is not None:
            value = flag_value if isinstance(flag_value, bool) else parse_value(spec, flag_value, spec.flag)
            source = spec.flag
        elif spec.env in environ:
            value = parse_value(spec, environ[spec.env], spec.env)
            source = spec.env
        else:
            value, source = spec.default, None
        if source is not None and spec.check is not None and value is not None:
            problem = spec.check(value)
            if problem:
                raise ConfigError(f"{source}={value!r} is invalid: expected {problem}")
        values[spec.path] = value
    return _assemble(cls, values, ())


def _assemble(cls: type[T], values: Mapping[tuple[str, ...], Any], prefix: tuple[str, ...]) -> T:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        path = (*prefix, f.name)
        kwargs[f.name] = _assemble(tp, values, path) if _is_section(tp) else values[path]
    return cls(**kwargs)


def describe(obj: Any) -> dict[str, Any]:
    """The effective settings as a flat dict for the start-up log, secrets redacted."""
    out: dict[str, Any] = {}
    for spec in iter_specs(type(obj)):
        value: Any = obj
        for part in spec.path:
            value = getattr(value, part)
        if spec.secret and value:
            value = "<redacted>"
        elif isinstance(value, Path):
            value = str(value)
        out[spec.env] = value
    return out

"""Settings: flags win over the environment, which wins over defaults; bad values name their source."""

from __future__ import annotations

import pytest

from crawlstream.cli import main
from crawlstream.errors import ConfigError
from crawlstream.settings import describe, load


def test_flag_wins_over_environment_which_wins_over_default() -> None:
    env = {"CRAWLSTREAM_FETCH_TIMEOUT_S": "5", "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0.5"}
    settings = load(env, {"fetch__timeout_s": "7"})
    assert settings.fetch.timeout_s == 7.0
    assert settings.scheduler.min_delay_s == 0.5
    assert settings.fetch.read_timeout_s == 10.0


def test_fixed_variables_keep_their_names() -> None:
    settings = load({"KAFKA_BOOTSTRAP_SERVERS": "k:9092", "CRAWLSTREAM_DATA_DIR": "/x"})
    assert settings.kafka_bootstrap_servers == "k:9092"
    assert str(settings.data_dir) == "/x"


def test_invalid_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="CRAWLSTREAM_BUS_PARTITIONS"):
        load({"CRAWLSTREAM_BUS_PARTITIONS": "3"})
    with pytest.raises(ConfigError, match="CRAWLSTREAM_FETCH_TIMEOUT_S"):
        load({"CRAWLSTREAM_FETCH_TIMEOUT_S": "soon"})


def test_boolean_flag_and_environment_forms() -> None:
    assert load({"CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "yes"}).fetch.allow_private_networks is True
    assert load({}, {"fetch__allow_private_networks": True}).fetch.allow_private_networks is True
    assert load({}).fetch.allow_private_networks is False


def test_secrets_are_redacted_in_the_startup_description() -> None:
    settings = load({"REDIS_URL": "redis://:hunter2@host:6379/0"})
    assert describe(settings)["REDIS_URL"] == "<redacted>"


def test_cli_exits_2_on_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["settings", "--bus-partitions", "5"])
    assert exc.value.code == 2
    assert "--bus-partitions" in capsys.readouterr().err


def test_settings_document_is_current() -> None:
    """docs/SETTINGS.md is generated; regenerate with `crawlstream settings --markdown`."""
    from pathlib import Path

    from crawlstream.cli._settings import markdown_table

    path = Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md"
    assert path.read_text() == markdown_table(), "run: crawlstream settings --markdown > docs/SETTINGS.md"


def test_every_commands_help_prints_each_setting_cleanly() -> None:
    """A "%" in a setting's help once made argparse print its own internals there."""
    import contextlib
    import io

    from crawlstream.cli import _parser

    parser = _parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, sub in commands.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            sub.parse_args(["--help"])
        text = out.getvalue()
        assert "option_strings" not in text, name
        if "--index-postings-shards" in text:  # commands with sub-commands list them instead
            assert "int(hh, 16) % shards" in " ".join(text.split()), name

"""The worker's ahead queue is reachable from its CLI and config file: `--ahead N`,
`ahead = N` in the TOML file, the flag over the file over the default; bad values refused."""

from __future__ import annotations

import pytest

from schedd_worker import cli
from schedd_worker.config import ConfigError, parse_config
from schedd_worker.sdk import Worker
from schedd_worker.timers import DEFAULT_AHEAD


def test_ahead_from_the_flag_the_file_or_the_default(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text("slots = 3\nahead = 500\n")
    cfg = parse_config(path.read_text())
    assert cfg.values["ahead"] == 500
    parse = cli.build_parser().parse_args
    assert cli._settings(parse(["--config", str(path)]), cfg).ahead == 500
    assert cli._settings(parse(["--ahead", "0", "--config", str(path)]), cfg).ahead == 0
    assert cli._settings(parse([]), None).ahead == DEFAULT_AHEAD


def test_bad_ahead_values_are_refused(capsys):
    with pytest.raises(ConfigError, match="ahead: must be 0 or more"):
        parse_config("ahead = -1")
    with pytest.raises(ConfigError, match="ahead: expected int"):
        parse_config('ahead = "x"')
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--ahead", "-3"])
    assert "must be at least 0" in capsys.readouterr().err


def test_the_sdk_passes_ahead_to_the_runtime():
    w = Worker("127.0.0.1:1", name="w", slots=2, ahead=7, allow_root=True)   # the suite may run as root
    rt = w._runtime()
    assert (rt.slots, rt.ahead) == (2, 7)
    assert Worker("127.0.0.1:1", name="w", allow_root=True)._runtime().ahead == DEFAULT_AHEAD

"""The command line's help and usage errors, as a new user meets them (issue 19)."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from asyncflow import cli
from asyncflow.cluster.spec import ClusterSpec

CLI_DEADLINE_S = 60  # guards against a hang only; the commands return at once


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "asyncflow", *args], capture_output=True,
                          text=True, timeout=CLI_DEADLINE_S,
                          env={k: v for k, v in os.environ.items() if k != "ASYNCFLOW_CONFIG"})


def test_no_command_prints_the_help_and_exits_0():
    result = run_cli()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: asyncflow")
    assert "worker" in result.stdout and "serve one task of a cluster" in result.stdout
    assert "asyncflow worker --help" in result.stdout
    assert run_cli("--version").stdout.startswith("asyncflow ")


def test_unknown_command_is_a_usage_error():
    result = run_cli("serve")
    assert result.returncode == 2
    assert "invalid choice: 'serve'" in result.stderr


def test_worker_help_has_examples_and_the_environment():
    result = run_cli("worker", "--help")
    assert result.returncode == 0, result.stderr
    help_text = result.stdout
    assert "examples:" in help_text and "environment:" in help_text
    for variable in ("ASYNCFLOW_CONFIG", "ASYNCFLOW_TOKEN"):
        assert variable in help_text
    # The epilog keeps its line breaks (RawDescriptionHelpFormatter).
    assert "\n  asyncflow worker --cluster cluster.json --job ps --task 0\n" in help_text


def _examples(epilog):
    """The epilog's example commands, continuation lines joined."""
    commands, current = [], ""
    for line in epilog.split("environment:")[0].splitlines()[1:]:
        current += " " + line.strip().rstrip("\\")
        if not line.rstrip().endswith("\\"):
            if current.strip():
                commands.append(current.strip())
            current = ""
    return commands


def test_every_example_in_the_worker_help_parses():
    examples = _examples(cli.WORKER_EPILOG)
    assert len(examples) >= 3
    parser = cli.build_parser()
    for example in examples:
        words = shlex.split(example)
        env = {}
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[:2] == ["asyncflow", "worker"], example
        args = parser.parse_args(words[1:])
        assert args.command == "worker"
        if args.cluster and args.cluster.startswith("{"):
            assert ClusterSpec.from_json(args.cluster).jobs, example
        for name, value in env.items():
            assert name == "ASYNCFLOW_CONFIG", example
            assert json.loads(value)["task"]["type"] == "worker"


@pytest.mark.parametrize("text", ['["127.0.0.1:2222"]', '"127.0.0.1:2222"'])
def test_a_cluster_that_is_json_but_not_an_object_says_what_shape_is_expected(text, tmp_path):
    with pytest.raises(ValueError) as info:
        ClusterSpec.from_json(text)
    message = str(info.value)
    assert "neither JSON" not in message
    assert "cluster is an object of job name -> addresses" in message
    path = tmp_path / "cluster.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"cluster file '{path}' is a JSON "):
        ClusterSpec.from_json(str(path))


def test_worker_with_a_json_list_cluster_reports_the_expected_shape():
    result = run_cli("worker", "--cluster", '["127.0.0.1:2222"]', "--job", "worker",
                     "--task", "0")
    assert result.returncode == 2
    assert result.stderr.startswith("asyncflow worker: cluster spec is a JSON list, but a "
                                    "cluster is an object of job name -> addresses, like {")

"""The intent regression and memory evaluation commands, as the README runs them, against an OpenAI-compatible
server over HTTP: defaults from the environment and the profiles, and thresholds that are judged and printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools import memory_evaluation as evaluation
from devtools.intent import regression
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn


def label(answer: str) -> Any:
    def respond(body: dict[str, Any]) -> ScriptedTurn:
        return ScriptedTurn(tool_calls=[ScriptedToolCall("report_intent", json.dumps({"label": answer}))])

    return respond


@pytest.fixture
def always_chat(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    """A model that labels every case "chat", configured the way a deployment is (environment only)."""
    with ModelServer(label("chat"), models=["qwen3.5-35b-a3b"], reject_unknown_models=True) as server:
        monkeypatch.setenv("LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("LLM_API_KEY", "test-key")
        monkeypatch.setenv("MODEL_ID_MAP", '{"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"}')
        yield server


def test_the_regression_needs_no_model_flag_and_sends_the_profiles_model_under_its_provider_id(
    always_chat: ModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the README's command runs with the endpoint, key and map in the environment and no --model
    status = regression.main(["--variant", "B", "--limit", "2"])
    # THEN it ran, against chat_default_b's model under the id the endpoint serves, and said it used no threshold
    out = capsys.readouterr().out
    assert status == 0, out
    assert {body["model"] for body in always_chat.requests} == {"qwen3.5-35b-a3b"}
    assert "model qwen3.5-30b-a3b (sent as qwen3.5-35b-a3b)" in out
    assert "threshold: none (--min-accuracy not given)" in out


def test_the_regression_exits_1_below_its_threshold_and_prints_it(
    always_chat: ModelServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # GIVEN four cases of which two are "chat": an accuracy of 0.5
    cases = regression.load_cases()
    chosen = [c for c in cases if c.label == "chat"][:2] + [c for c in cases if c.label == "reject"][:2]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in chosen), encoding="utf-8")
    # WHEN the command runs with thresholds on either side of it
    below = regression.main(["--variant", "B", "--cases", str(path), "--min-accuracy", "0.75"])
    out_below = capsys.readouterr().out
    above = regression.main(["--variant", "B", "--cases", str(path), "--min-accuracy", "0.5"])
    out_above = capsys.readouterr().out
    # THEN it fails below, passes at the threshold, and prints which threshold it used either way
    assert (below, above) == (1, 0)
    assert "threshold: --min-accuracy 0.750; measured 0.500: FAIL" in out_below
    assert "threshold: --min-accuracy 0.500; measured 0.500: PASS" in out_above


def test_the_memory_evaluation_exits_1_below_its_recall_threshold_and_prints_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a model that never proposes a memory (recall 0 on cases that expect writes)
    with ModelServer(lambda body: ScriptedTurn(text=["none"])) as server:
        monkeypatch.setenv("LLM_API_KEY", "test-key")
        # WHEN the evaluation runs on a few cases with and without a threshold
        failing = evaluation.main(["--base-url", server.base_url, "--limit", "4", "--min-recall", "0.5"])
        out_failing = capsys.readouterr().out
        unjudged = evaluation.main(["--base-url", server.base_url, "--limit", "4"])
        out_unjudged = capsys.readouterr().out
    # THEN it exits 1 under the threshold and says so, and without one it only reports
    assert failing == 1
    assert "threshold: --min-recall 0.500; measured 0.000: FAIL" in out_failing
    assert unjudged == 0
    assert "threshold: none (--min-recall not given)" in out_unjudged


@pytest.mark.parametrize(
    "argv",
    [
        ["--variant", "B", "--scripted", "--min-accuracy", "1.5"],
        ["--variant", "B", "--scripted", "--min-accuracy", "-0.1"],
    ],
)
def test_a_threshold_outside_0_to_1_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        regression.main(argv)
    assert exit_.value.code == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_command_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devtools.intent.regression", "--scripted", "--variant", "B", "--limit", "5"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^all\s+5\s+5\s+100.0%$", done.stdout, re.MULTILINE)

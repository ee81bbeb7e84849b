"""Model ids as deployment configuration: MODEL_ID_MAP parsed, validated, and handed to the model adapter."""

from __future__ import annotations

import logging

import pytest

from shared.errors import ConfigurationError
from shared.llm.model_ids import parse_model_id_map
from shared.llm.openai_chat import OpenAIChatModel
from shared.settings import Settings
from shared.wiring import Services


def test_the_map_is_read_from_the_environment_and_reaches_the_adapter() -> None:
    settings = Settings.from_env(
        {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_ID_MAP": '{"qwen3.5-30b-a3b": " qwen3.5-35b-a3b "}'}
    )
    model = Services(settings).model
    assert isinstance(model, OpenAIChatModel)
    assert model.provider_model_id("qwen3.5-30b-a3b") == "qwen3.5-35b-a3b"
    assert model.provider_model_id("qwen3.5-flash") == "qwen3.5-flash"


def test_the_removed_per_executor_settings_are_gone() -> None:
    settings = Settings.from_env({"WORKER_MODEL_ID": "x", "MEMORY_MODEL_ID": "y"})
    assert not {"worker_model_id", "memory_model_id"} & set(settings.model_dump())


@pytest.mark.parametrize("text", [None, "", "   ", "{}"])
def test_no_map_sends_every_id_as_it_is(text: str | None) -> None:
    assert parse_model_id_map(text) == {}


@pytest.mark.parametrize("text", ['{"a": ', '["a", "b"]', '{"a": 1}', '{"a": ""}', '{"": "b"}', '"qwen3.5-35b-a3b"'])
def test_a_malformed_map_is_refused_with_the_expected_shape(text: str) -> None:
    with pytest.raises(ConfigurationError) as failure:
        parse_model_id_map(text)
    assert failure.value.code == "invalid_model_id_map"
    assert '{"<logical id>": "<provider id>"}' in failure.value.message


def test_a_provider_id_the_table_does_not_know_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(llm_base_url="http://127.0.0.1:9/v1", model_id_map='{"qwen3.5-30b-a3b": "my-finetune-7b"}')
    with caplog.at_level(logging.WARNING, logger="shared.wiring"):
        ids = Services(settings).model_ids
    assert ids == {"qwen3.5-30b-a3b": "my-finetune-7b"}
    [record] = caplog.records
    assert record.__dict__["provider_model"] == "my-finetune-7b"
    assert "does not know" in record.getMessage()

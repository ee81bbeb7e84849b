"""``make dev``: the whole system on one machine with embedded defaults (no cloud account, no API key).

DynamoDB is emulated in-process by moto; events go to an in-process Redis-compatible store unless REDIS_URL is
set; without LLM_BASE_URL the built-in offline model answers (and says so).
"""

from __future__ import annotations

import logging
import os

import uvicorn

from functions.agent_api.app import create_app
from shared.local.embedded import EmbeddedAws, embedded_stream_client
from shared.settings import LOCAL_JWT_SECRET, Settings
from shared.wiring import Services


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    os.environ.setdefault("JWT_SECRET", LOCAL_JWT_SECRET)
    settings = Settings.from_env().model_copy(update={"embedded": True})
    aws = EmbeddedAws(settings)
    aws.start()
    overrides = {}
    if not settings.redis_url:
        from shared.adapters.redis_stream import RedisEventStream

        overrides["stream"] = RedisEventStream(embedded_stream_client())
    services = Services(settings, overrides=overrides)
    app = create_app(services)
    port = int(os.environ.get("PORT", "8000"))
    logging.getLogger(__name__).info(
        "serving", extra={"url": f"http://127.0.0.1:{port}", "model": type(services.model).__name__}
    )
    try:
        uvicorn.run(app, host=os.environ.get("HOST", "127.0.0.1"), port=port, log_level="info")
    finally:
        aws.stop()


if __name__ == "__main__":
    main()

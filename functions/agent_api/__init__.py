"""The HTTP API: a FastAPI app served by uvicorn (streaming, under the Lambda Web Adapter) and by Mangum."""

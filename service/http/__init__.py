"""The REST front end: FastAPI routes, the raw ASGI hot path, middleware, and their wire formats."""

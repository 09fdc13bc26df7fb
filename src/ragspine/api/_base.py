"""The base of every response model."""

from pydantic import BaseModel, ConfigDict


class Reply(BaseModel):
    """A response body. Fields the model does not declare pass through (``extra="allow"``): a
    client built against an older version keeps working when the server adds a field, and the
    server never drops one it meant to send. The test suite runs the server with these models
    made strict (``tests/conftest.py``), so a route that sends an undeclared field fails there
    instead of being missing from the OpenAPI document."""

    model_config = ConfigDict(extra="allow")


def reply_models() -> list[type[Reply]]:
    """Every response model, subclasses included (for the strict test mode)."""
    out: list[type[Reply]] = []
    todo: list[type[Reply]] = [Reply]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out

"""What both directions of the Messages <-> Chat Completions translation share."""

from __future__ import annotations

import json
from typing import Any

from harnessopt.protocols import ModelError

RAW_ARGUMENTS = "_raw_arguments"  # tool_use input key of arguments that were not a JSON object


def bad(field: str, what: str) -> ModelError:
    """The 400 that names the field: ``field: what``."""
    return ModelError(400, "invalid_request_error", f"{field}: {what}")


def plain_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(content if isinstance(content, list) else [None]):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise bad(f"{where}[{j}]", "only text parts are supported here")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {RAW_ARGUMENTS: raw if isinstance(raw, str) else json.dumps(raw)}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: raw}


def arguments_text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])  # what the model wrote, handed back as it was
    return json.dumps(value if value is not None else {}, ensure_ascii=False)

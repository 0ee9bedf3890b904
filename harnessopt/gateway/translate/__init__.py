"""Messages API <-> Chat Completions API, both ways, for requests and responses.

The gateway keeps one canonical form, Messages API bodies: what the transcript, the trajectory
renderer, the lease policy and the budget see whatever API the harness spoke and whatever
upstream answered. So a harness speaking Chat Completions has its request translated here to a
Messages body (``chat_request_to_messages``) and gets the canonical answer back as a chat
completion (``messages_response_to_chat``); an ``openai`` upstream gets the canonical request as
a chat request (``messages_request_to_chat``) and its answer is made canonical
(``chat_response_to_messages``).

What is translated: system prompt (system/developer messages <-> ``system``), text, images
(base64 data URLs <-> base64 sources; URLs <-> ``url`` sources), tool definitions (custom tools
<-> functions; the optimizer's ``bash_*``/``text_editor_*`` tools get their documented input
schemas), tool calls and results, ``tool_choice`` and parallel tool use, stop sequences, stop
reasons, usage. What one side has and the other does not is refused with a 400
``invalid_request_error`` whose message starts with the field (``n: ...``), never dropped
silently; the few hints that are accepted and ignored are listed in docs/models.md.
"""

from harnessopt.gateway.translate.common import RAW_ARGUMENTS, bad
from harnessopt.gateway.translate.harness_chat import (
    chat_request_to_messages,
    chat_usage,
    messages_response_to_chat,
)
from harnessopt.gateway.translate.harness_responses import (
    messages_response_to_responses,
    responses_request_to_messages,
    responses_usage,
)
from harnessopt.gateway.translate.upstream_chat import (
    BASH_SCHEMA,
    EDITOR_SCHEMA,
    chat_response_to_messages,
    messages_request_to_chat,
)

__all__ = [
    "BASH_SCHEMA",
    "EDITOR_SCHEMA",
    "RAW_ARGUMENTS",
    "bad",
    "chat_request_to_messages",
    "chat_response_to_messages",
    "chat_usage",
    "messages_request_to_chat",
    "messages_response_to_chat",
    "messages_response_to_responses",
    "responses_request_to_messages",
    "responses_usage",
]

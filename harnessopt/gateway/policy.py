"""What a gateway lease may ask for, and the most a call can cost: checked before it is forwarded.

A lease belongs to a role: ``target`` (a harness in a sandbox) or ``optimizer``. Per role the
policy fixes the one model its calls may name (a dated snapshot of it too, e.g.
``claude-sonnet-4-5-20250929`` for ``claude-sonnet-4-5``), the largest ``max_tokens`` and the
largest request body. Tools that run on the API's side (web search and fetch, code execution,
any tool whose ``type`` is not ``custom``, ``bash_*`` or ``text_editor_*``), ``mcp_servers``
and image/document sources of type ``url`` make the API reach the network on a sandbox's
behalf and are billed apart from tokens; they are refused unless ``model.allow_server_tools``.
Every refusal is a 400 ``invalid_request_error`` that names the field.

Prices, USD per million tokens (input / output), Anthropic list prices (a run's ``prices:``
globs in harnessopt.yaml come first):
opus 4.5+ 5/25; opus 4, 4.1 and 3 15/75; sonnet (3.5 to 4.5) 3/15; haiku 4.5 1/5;
haiku 3.5 0.80/4; haiku 3 0.25/1.25. Cache writes cost 1.25x input (2x for a one-hour cache),
cache reads 0.1x input; a prompt over 200k input tokens costs 2x input and 1.5x output.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harnessopt.config import BudgetConfig, Config, GatewayConfig
from harnessopt.gateway.media import OPAQUE_KEYS, media_bound
from harnessopt.protocols import ModelError

CLIENT_TOOL_TYPES = ("custom",)
CLIENT_TOOL_PREFIXES = ("bash_", "text_editor_")  # client tools with a type (the optimizer's)
LONG_CONTEXT = 200_000  # input tokens past which a prompt is billed at long-context rates
MIB = 1024 * 1024

# (model name regex, USD per Mtok input, USD per Mtok output); first match wins.
PRICES: list[tuple[str, float, float]] = [
    (r"opus-4-[5-9]|opus-[5-9]", 5.0, 25.0),
    (r"opus", 15.0, 75.0),
    (r"sonnet", 3.0, 15.0),
    (r"haiku-4|haiku-[5-9]", 1.0, 5.0),
    (r"3-5-haiku|haiku-3-5", 0.80, 4.0),
    (r"haiku", 0.25, 1.25),
]


# The user's own prices (``prices:`` in harnessopt.yaml): model-name glob -> (input, output).
Prices = Mapping[str, tuple[float, float]]


def price_of(model: str, prices: Prices | None = None) -> tuple[float, float] | None:
    """(input, output) USD per million tokens of a model name, or None when unknown.

    ``prices`` (globs, matched whole and case-sensitively, in order) come before the built-in table.
    """
    found = _price(model, prices)
    return found[:2] if found else None


def _price(model: str, prices: Prices | None) -> tuple[float, float, bool] | None:
    """(input, output, long-context rates apply): the user's flat prices, else the built-in table."""
    for glob, (g_in, g_out) in (prices or {}).items():
        if fnmatch.fnmatchcase(model, glob):
            return g_in, g_out, False
    for pattern, p_in, p_out in PRICES:
        if re.search(pattern, model):
            return p_in, p_out, True
    return None


def unpriced_budget(cfg: Config, with_optimizer: bool = True) -> str | None:
    """Why ``budget.max_cost`` cannot bind this run (a role's model has no price), or None.

    Calls of a model without a price are counted as $0, so a dollar budget would never refuse
    one. The scripted model costs nothing and needs no price; the optimizer's model counts only
    when the optimizer runs (``with_optimizer``) and calls a model (any backend but ``manual``).
    """
    if cfg.budget.max_cost is None:
        return None
    prices = cfg.price_table
    roles = [("model.target", cfg.model.target, cfg.model.provider)]
    if with_optimizer and cfg.optimizer.backend != "manual":
        roles.append(("optimizer.model", cfg.optimizer.model, cfg.optimizer_provider))
    for setting, model, provider in roles:
        if provider != "scripted" and price_of(model, prices) is None:
            return (
                f"budget.max_cost cannot bind: {setting} {model!r} has no price; add it under prices: in "
                f"harnessopt.yaml (e.g. prices: {{{model!r}: [INPUT_USD, OUTPUT_USD]}} per million tokens) "
                "or drop budget.max_cost"
            )
    return None


def cost_of(model: str, usage: Mapping[str, Any], prices: Prices | None = None) -> float | None:
    """USD of a response's ``usage`` at list price, or None for a model without a price."""
    price = _price(model, prices)
    if price is None:
        return None
    p_in, p_out, tiered = price
    fresh = int(usage.get("input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    read = int(usage.get("cache_read_input_tokens") or 0)
    if tiered and fresh + written + read > LONG_CONTEXT:
        p_in, p_out = p_in * 2, p_out * 1.5
    hour = int((usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens") or 0)
    hour = min(hour, written)
    units = (
        fresh * p_in
        + (written - hour) * p_in * 1.25
        + hour * p_in * 2
        + read * p_in * 0.1
        + int(usage.get("output_tokens") or 0) * p_out
    )
    return units / 1_000_000


def input_bound(body: Mapping[str, Any], raw_len: int) -> int:
    """At most how many input tokens a request can be billed for.

    A token is at least one byte of text, so the body's bytes bound its text; base64 images
    and PDFs are counted instead at what they are billed (``media``: an image by its pixels, a
    PDF by its pages and text); each tool adds its system prompt (at most about 700 tokens),
    counted as 1024.
    """
    media_bytes, media_tokens = media_bound(body)
    tools = body.get("tools")
    return raw_len - media_bytes + media_tokens + 1024 * (1 + (len(tools) if isinstance(tools, list) else 0))


def cost_bound(
    model: str, input_tokens: int, output_tokens: int, caches: bool, prices: Prices | None = None
) -> float:
    """The most a call with these token bounds can cost (0 for a model without a price)."""
    price = _price(model, prices)
    if price is None:
        return 0.0
    p_in, p_out, tiered = price
    if tiered and input_tokens > LONG_CONTEXT:
        p_in, p_out = p_in * 2, p_out * 1.5
    if caches:  # a one-hour cache write costs twice the input price
        p_in *= 2
    return (input_tokens * p_in + output_tokens * p_out) / 1_000_000


def reserve(
    body: Mapping[str, Any], raw: bytes, max_out: int, prices: Prices | None = None
) -> tuple[int, float]:
    """What the gateway holds back for a call before it forwards it: the bound on its input tokens
    and the most the call can cost, given the ``max_tokens`` it may ask (``max_out``)."""
    inp = input_bound(body, len(raw))
    return inp, cost_bound(str(body.get("model")), inp, max_out, b"cache_control" in raw, prices)


@dataclass(frozen=True)
class RolePolicy:
    """What the leases of one role may do."""

    model: str | None  # the one model its calls may name (or a dated snapshot); None: any
    max_output_tokens: int
    max_body: int  # bytes
    model_setting: str = ""  # the config key naming ``model``, for messages


@dataclass(frozen=True)
class LeasePolicy:
    """Per-role rules of the gateway; roles not in ``roles`` get the target's."""

    roles: Mapping[str, RolePolicy] = field(default_factory=dict)
    allow_server_tools: bool = False
    max_calls_per_lease: int = 10
    prices: Prices = field(default_factory=dict)  # the user's, before the built-in table

    @classmethod
    def build(
        cls,
        budget: BudgetConfig,
        settings: GatewayConfig | None = None,
        models: Mapping[str, str] | None = None,
        allow_server_tools: bool = False,
    ) -> LeasePolicy:
        """Limits from the budget and gateway settings; ``models`` maps role -> its one model."""
        s = settings or GatewayConfig()
        models = models or {}
        where = {"target": "model.target", "optimizer": "optimizer.model"}
        roles = {
            "target": RolePolicy(
                models.get("target"),
                budget.target_max_output_tokens,
                int(s.target_body_mb * MIB),
                where["target"],
            ),
            "optimizer": RolePolicy(
                models.get("optimizer"),
                budget.optimizer_max_output_tokens,
                int(s.optimizer_body_mb * MIB),
                where["optimizer"],
            ),
        }
        return cls(roles, allow_server_tools, s.max_calls_per_lease)

    @classmethod
    def from_config(cls, cfg: Config) -> LeasePolicy:
        """The policy of a run: the target and optimizer models of ``cfg``, its limits."""
        models = {"target": cfg.model.target, "optimizer": cfg.optimizer.model}
        built = cls.build(cfg.budget, cfg.gateway, models, cfg.model.allow_server_tools)
        return replace(built, prices=cfg.price_table)

    def of(self, role: str) -> RolePolicy:
        """The rules of ``role`` (the target's for a role without its own)."""
        found = self.roles.get(role) or self.roles.get("target")
        return found or RolePolicy(
            None, BudgetConfig().target_max_output_tokens, int(GatewayConfig().target_body_mb * MIB)
        )

    def check(self, role: str, body: Mapping[str, Any]) -> int:
        """Refuse (ModelError 400) what ``role`` may not ask for; returns the call's max_tokens."""
        rules = self.of(role)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _bad("model", "is required (a model name)")
        if rules.model is not None and not _same_model(model, rules.model):
            raise _bad(
                "model",
                f"{model!r} is not this run's {role} model: {role} calls may use {rules.model!r} only "
                f"({rules.model_setting} in harnessopt.yaml)",
            )
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _bad("max_tokens", "is required (a positive integer)")
        if max_tokens > rules.max_output_tokens:
            raise _bad(
                "max_tokens",
                f"{max_tokens} is over the {rules.max_output_tokens} a {role} call may ask for; ask for "
                f"fewer or raise budget.{role}_max_output_tokens in harnessopt.yaml",
            )
        if not self.allow_server_tools:
            _check_network_features(body)
        return max_tokens


def _same_model(asked: str, allowed: str) -> bool:
    return asked == allowed or re.fullmatch(re.escape(allowed) + r"-\d{8}", asked) is not None


def _bad(name: str, what: str) -> ModelError:
    return ModelError(400, "invalid_request_error", f"{name}: {what}")


_SERVER_TOOL_WHY = (
    "runs on the API's side (network access, billed apart from tokens); harnessopt refuses it "
    "unless model.allow_server_tools is true in harnessopt.yaml"
)


# Sources the API reads from the request itself. Any other (``url``: fetched from the network;
# ``file``: a Files API upload of the key's owner) is refused unless server tools are allowed.
SOURCE_TYPES = frozenset({"base64", "text", "content"})
# Beta names (dateless prefixes) that only change how the request is processed or answered.
# Any other value of ``anthropic-beta`` (files API, web fetch, code execution, MCP client, skills,
# agents, batches, ...) is not forwarded unless server tools are allowed: with them the API
# reads files, the network or containers for the sandbox. Claude Code's own betas are here.
SAFE_BETAS = (
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "prompt-caching-",
    "extended-cache-ttl-",
    "context-1m-",
    "output-128k-",
    "effort-",
    "structured-outputs-",
    "token-counting-",
    "redact-thinking-",
    "thinking-token-count-",
    "compact-",
    "oauth-",
    "mid-conversation-system-",  # system-role messages in `messages` (Claude Code on newer models)
)


def forwarded_betas(value: str, allow_server_tools: bool) -> tuple[str, list[str]]:
    """The ``anthropic-beta`` value to forward, and the betas dropped from it (SAFE_BETAS)."""
    betas = [b.strip() for b in value.split(",") if b.strip()]
    if allow_server_tools:
        return ",".join(betas), []
    kept = [b for b in betas if b.lower().startswith(SAFE_BETAS)]
    return ",".join(kept), [b for b in betas if b not in kept]


def _check_network_features(body: Mapping[str, Any]) -> None:
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind is None or kind in CLIENT_TOOL_TYPES:
            continue
        if not isinstance(kind, str) or not kind.startswith(CLIENT_TOOL_PREFIXES):
            raise _bad(f"tools[{i}].type", f"{kind!r} is a server tool: it {_SERVER_TOOL_WHY}")
    if body.get("mcp_servers"):
        raise _bad("mcp_servers", f"an MCP server connection {_SERVER_TOOL_WHY}")
    if body.get("container"):
        raise _bad("container", f"a code execution container {_SERVER_TOOL_WHY}")
    if found := _foreign_source(body, ""):
        where, kind = found
        raise _bad(
            where, f"a {kind!r} source is read by the API from outside the request; it {_SERVER_TOOL_WHY}"
        )


def _foreign_source(node: Any, where: str) -> tuple[str, Any] | None:
    """(path, type) of the first ``source`` anywhere in ``node`` whose type is not in SOURCE_TYPES,
    or of a block naming an uploaded file (``file_id``)."""
    if isinstance(node, list):
        for j, item in enumerate(node):
            if found := _foreign_source(item, f"{where}[{j}]"):
                return found
        return None
    if not isinstance(node, dict):
        return None
    source = node.get("source")
    if isinstance(source, dict) and source.get("type") not in SOURCE_TYPES:
        return f"{where}.source.type".lstrip("."), source.get("type")
    if node.get("file_id"):
        return f"{where}.file_id".lstrip("."), "file"
    for key, value in node.items():
        if key in OPAQUE_KEYS or not isinstance(value, (dict, list)):
            continue
        if found := _foreign_source(value, f"{where}.{key}"):
            return found
    return None

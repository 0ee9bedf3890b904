"""A deterministic model driven by a YAML script, so the whole tool runs offline.

The script is a list of rules; the first rule whose conditions all hold produces the reply.
Conditions are regexes (``re.search``) on the system prompt, the first and the last user
message, plus the caller's role and the index of the assistant turn being produced. Named
regex groups and the ``lookup`` table fill ``{placeholders}`` in the reply text and in tool
inputs. The format is documented in docs/models.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harnessopt.errors import UserError, not_utf8
from harnessopt.gateway.http import estimate_input_tokens, text_of
from harnessopt.protocols import Forward, Model, ModelError

_REGEX_FIELDS = ("system", "first_user", "last_user")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookupEntry(_Strict):
    match: str
    """Regex searched in the last user message text."""
    value: Any
    """What ``{lookup}`` becomes when ``match`` is the first entry that matches."""


class ToolCall(_Strict):
    name: str
    """Tool name of the generated tool_use block."""
    input: dict[str, Any] = Field(default_factory=dict)
    """Tool input; strings inside are expanded like the reply."""


class Rule(_Strict):
    role: Literal["target", "optimizer"] | None = None
    """Only for calls made in this role."""
    system: str | None = None
    """Regex on the system prompt text."""
    first_user: str | None = None
    """Regex on the first user message text."""
    last_user: str | None = None
    """Regex on the last user message text (tool_result text included)."""
    turn: int | None = Field(None, ge=1)
    """1-based index of the assistant turn being produced."""
    reply: str | None = None
    """Text block of the reply (str.format with named groups and {lookup})."""
    tool_use: list[ToolCall] | None = None
    """tool_use blocks to emit; the reply's stop_reason is then tool_use."""


class Script(_Strict):
    lookup: list[LookupEntry] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)
    default: str | None = None
    """Reply when no rule matches; without it an unmatched request is a 400 error."""
    latency_s: float = Field(0.0, ge=0.0, le=600.0)
    """Seconds every reply waits before it is returned (a real model's latency, for benchmarks)."""

    @field_validator("rules")
    @classmethod
    def _rules_reply(cls, rules: list[Rule]) -> list[Rule]:
        for i, rule in enumerate(rules):
            if rule.reply is None and not rule.tool_use:
                raise ValueError(f"rule {i + 1} has neither 'reply' nor 'tool_use'")
        return rules


class _MissingLookup(Exception):
    """A rule needs {lookup} but no lookup entry matched: the rule does not apply."""


class ScriptedModel(Model):
    """Replies chosen by rules from a YAML script; same request in, same response out."""

    name = "scripted"

    def __init__(self, script: Script, source: str = "<script>"):
        self.script = script
        self.source = source
        self._lookup = [(re.compile(e.match), e.value) for e in script.lookup]
        self._rules = [(rule, _compile_rule(rule, i, source)) for i, rule in enumerate(script.rules)]

    @classmethod
    def from_yaml(cls, path: Path) -> ScriptedModel:
        """Load and validate a script file; any problem is a UserError naming it."""
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"scripted model: script {path} does not exist; fix model.script") from None
        except UnicodeDecodeError as e:
            raise UserError(f"scripted model: {not_utf8(path, e)}") from None
        except yaml.YAMLError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"scripted model: {path} is not valid YAML ({first})") from e
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<script>") -> ScriptedModel:
        """Build from an already-parsed script mapping."""
        if not isinstance(data, dict):
            raise UserError(f"scripted model: {source} must be a mapping with 'rules' (see docs/models.md)")
        try:
            script = Script.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(
                f"scripted model: {source}: {loc or 'script'}: {err['msg']} (see docs/models.md)"
            ) from e
        return cls(script, source)

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        """The reply of the first matching rule as a complete Messages API response body.

        ``forward`` (beta headers, query string) is accepted and ignored: the script decides.
        """
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        texts = {
            "system": text_of(request.get("system")),
            "first_user": users[0] if users else "",
            "last_user": users[-1] if users else "",
        }
        assistant_turns = sum(1 for m in messages if m.get("role") == "assistant")
        ends_with_prefill = bool(messages) and messages[-1].get("role") == "assistant"
        turn = assistant_turns if ends_with_prefill else assistant_turns + 1
        lookup = next((v for rx, v in self._lookup if rx.search(texts["last_user"])), None)
        for rule, regexes in self._rules:
            if (rule.role and rule.role != role) or (rule.turn and rule.turn != turn):
                continue
            groups: dict[str, Any] = {}
            matches = [regexes[f].search(texts[f]) for f in regexes]
            if not all(matches):
                continue
            for m in matches:
                groups.update({k: v if v is not None else "" for k, v in m.groupdict().items()})  # type: ignore[union-attr]
            try:
                content = _render(rule, groups, lookup)
            except _MissingLookup:
                continue
            return self._response(request, content)
        if self.script.default is not None:
            return self._response(request, [{"type": "text", "text": self.script.default}])
        snippet = texts["last_user"][:120].replace("\n", " ")
        raise ModelError(
            400, "invalid_request_error", f"scripted model ({self.source}): no rule matches '{snippet}'"
        )

    def _response(self, request: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
        if self.script.latency_s:
            time.sleep(self.script.latency_s)
        key = json.dumps(request, sort_keys=True, default=str) + json.dumps(content, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()
        for i, block in enumerate(content):
            if block["type"] == "tool_use":
                block["id"] = "toolu_" + hashlib.sha256(f"{digest}:{i}".encode()).hexdigest()[:24]
        out_chars = sum(len(text_of([b])) for b in content)
        has_tools = any(b["type"] == "tool_use" for b in content)
        return {
            "id": f"msg_{digest[:24]}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model") or self.name,
            "content": content,
            "stop_reason": "tool_use" if has_tools else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": estimate_input_tokens(request),
                "output_tokens": math.ceil(out_chars / 4),
            },
        }


def _compile_rule(rule: Rule, index: int, source: str) -> dict[str, re.Pattern[str]]:
    """Compile a rule's regexes and check its placeholders can be filled."""
    where = f"scripted model: {source}: rule {index + 1}"
    compiled: dict[str, re.Pattern[str]] = {}
    for name in _REGEX_FIELDS:
        pattern = getattr(rule, name)
        if pattern is None:
            continue
        try:
            compiled[name] = re.compile(pattern)
        except re.error as e:
            raise UserError(f"{where}: {name} is not a valid regex ({e})") from e
    known = {"lookup"} | {g for rx in compiled.values() for g in rx.groupindex}
    for text in _template_strings(rule):
        try:
            fields = {
                f.split(".")[0].split("[")[0]
                for _, f, _, _ in string.Formatter().parse(text)
                if f is not None
            }
        except ValueError as e:
            raise UserError(f"{where}: bad placeholder in {text!r} ({e}); write {{{{ }}}} for braces") from e
        if unknown := fields - known:
            raise UserError(
                f"{where}: placeholder {{{sorted(unknown)[0]}}} is not a named regex group or lookup"
            )
    return compiled


def _template_strings(rule: Rule) -> list[str]:
    out = [rule.reply] if rule.reply is not None else []
    for call in rule.tool_use or []:
        out.extend(_strings_in(call.input))
    return out


def _strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_in(v)]
    return []


def _render(rule: Rule, groups: dict[str, Any], lookup: Any) -> list[dict[str, Any]]:
    variables = dict(groups)
    if lookup is not None:
        variables["lookup"] = lookup

    def expand(value: Any) -> Any:
        if isinstance(value, str):
            try:
                return value.format(**variables)
            except KeyError as e:  # only {lookup} can be missing: placeholders were checked on load
                raise _MissingLookup from e
        if isinstance(value, dict):
            return {k: expand(v) for k, v in value.items()}
        if isinstance(value, list):
            return [expand(v) for v in value]
        return value

    content: list[dict[str, Any]] = []
    if rule.reply is not None and (rule.reply or not rule.tool_use):
        content.append({"type": "text", "text": expand(rule.reply)})
    for call in rule.tool_use or []:
        content.append({"type": "tool_use", "id": "", "name": call.name, "input": expand(call.input)})
    return content

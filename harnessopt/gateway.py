"""The host-side model gateway: the only way a harness or the optimizer reaches a model.

Every sandboxed run gets a *lease*: a fresh random token that the harness uses as its API key
(``ANTHROPIC_API_KEY``) against the gateway's URL or Unix socket (``ANTHROPIC_BASE_URL``). The
gateway checks the token, forwards the request body to the configured ``Model`` (which alone
holds the real key), records the exchange under that token, and counts calls, tokens and list
-price cost per (role, round). ``release(token)`` hands back the recorded exchanges, which are
the run's transcript whatever the harness itself logs. Calls past the run's budget are refused
with a 429 that tells the SDK not to retry and the user which setting to raise.

Prices used for cost, USD per million tokens (input / output), Anthropic list prices:
opus 4.5+ 5/25; opus 4, 4.1 and 3 15/75; sonnet (3.5 to 4.5) 3/15; haiku 4.5 1/5;
haiku 3.5 0.80/4; haiku 3 0.25/1.25. Cache writes cost 1.25x input, cache reads 0.1x input.
A model outside this table (e.g. the scripted model) costs 0, with a note in ``notes``.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.config import BudgetConfig
from harnessopt.errors import UserError
from harnessopt.messages_http import COUNT_TOKENS_PATH, ApiCall, MessagesServer, estimate_input_tokens
from harnessopt.protocols import Exchange, Forward, GatewayLease, Model, ModelError, Usage

SOCKET_NAME = "gateway.sock"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS

# (model name regex, USD per Mtok input, USD per Mtok output); first match wins.
PRICES: list[tuple[str, float, float]] = [
    (r"opus-4-[5-9]|opus-[5-9]", 5.0, 25.0),
    (r"opus", 15.0, 75.0),
    (r"sonnet", 3.0, 15.0),
    (r"haiku-4|haiku-[5-9]", 1.0, 5.0),
    (r"3-5-haiku|haiku-3-5", 0.80, 4.0),
    (r"haiku", 0.25, 1.25),
]


def price_of(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens of a model name, or None when unknown."""
    for pattern, p_in, p_out in PRICES:
        if re.search(pattern, model):
            return p_in, p_out
    return None


@dataclass
class _Lease:
    role: str
    round_no: int
    task_id: str | None
    exchanges: list[Exchange] = field(default_factory=list)


class Gateway:
    """A Messages API server on loopback TCP (and a Unix socket in ``socket_dir`` when given).

    Thread safe: model calls of different leases run concurrently; bookkeeping is locked.
    """

    def __init__(self, model: Model, budget: BudgetConfig, *, socket_dir: Path | None = None):
        self.model = model
        self.budget = budget
        socket_path = Path(socket_dir) / SOCKET_NAME if socket_dir is not None else None
        if socket_path is not None and len(str(socket_path)) > _MAX_SOCKET_PATH:
            raise UserError(
                f"gateway socket path {socket_path} is too long for a Unix socket; use a shorter directory"
            )
        self._server = MessagesServer(self._handle, socket_path=socket_path)
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {}
        self._usage: dict[tuple[str, int], Usage] = defaultdict(Usage)
        self._in_flight = 0
        self.refusals = 0  # calls refused for the budget: runs that made them say nothing about a candidate
        self.notes: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Gateway:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``; valid after ``start()``."""
        return self._server.base_url

    @property
    def socket_path(self) -> Path | None:
        """The Unix socket (mode 0666) when a ``socket_dir`` was given."""
        return self._server.socket_path

    # ------------------------------------------------------------------ leases

    def lease(self, role: str, round_no: int, task_id: str | None = None) -> GatewayLease:
        """A fresh token whose calls are counted for (role, round) and recorded until released."""
        token = "ho-" + secrets.token_urlsafe(24)
        with self._lock:
            self._leases[token] = _Lease(role, round_no, task_id)
        return GatewayLease(token=token, base_url=self.base_url, socket_path=self.socket_path)

    def release(self, token: str) -> list[Exchange]:
        """Forget the token (later calls with it get 401) and return its exchanges in order."""
        with self._lock:
            lease = self._leases.pop(token, None)
        return lease.exchanges if lease else []

    # ------------------------------------------------------------------ accounting

    def usage(self) -> dict[tuple[str, int], Usage]:
        """Usage per (role, round), a snapshot."""
        with self._lock:
            return {
                k: Usage(v.calls, v.input_tokens, v.output_tokens, v.cost_usd) for k, v in self._usage.items()
            }

    def total(self) -> Usage:
        """Usage of the whole run so far."""
        out = Usage()
        for u in self.usage().values():
            out.add(u)
        return out

    def exhausted(self) -> str | None:
        """Why the budget refuses further calls (the message callers get), or None."""
        with self._lock:
            return self._budget_problem(reserve=False)

    def _budget_problem(self, reserve: bool) -> str | None:
        total = Usage()
        for u in self._usage.values():
            total.add(u)
        b = self.budget
        # In-flight calls hold a slot so that concurrent runs cannot overshoot max_calls.
        calls = total.calls + (self._in_flight if reserve else 0)
        if b.max_calls is not None and calls >= b.max_calls:
            spent = f"{total.calls} of {b.max_calls} model calls"
            return _budget_message(spent, "max_calls")
        tokens = total.input_tokens + total.output_tokens
        if b.max_tokens is not None and tokens >= b.max_tokens:
            return _budget_message(f"{tokens} of {b.max_tokens} tokens", "max_tokens")
        if b.max_cost is not None and total.cost_usd >= b.max_cost:
            return _budget_message(f"${total.cost_usd:.4f} of ${b.max_cost:.2f}", "max_cost")
        return None

    # ------------------------------------------------------------------ serving

    def _handle(self, call: ApiCall) -> dict[str, Any]:
        token = call.api_key() or ""
        with self._lock:
            lease = self._leases.get(token)
        if lease is None:
            raise ModelError(401, "authentication_error", "invalid or expired harnessopt gateway token")
        if call.path == COUNT_TOKENS_PATH:
            return {"input_tokens": estimate_input_tokens(call.body)}
        with self._lock:
            problem = self._budget_problem(reserve=True)
            if problem is None:
                self._in_flight += 1
        started, t0 = time.time(), time.monotonic()
        if problem is not None:
            with self._lock:
                self.refusals += 1
            self._record(lease, call, None, problem, started, 0.0)
            raise ModelError(429, "rate_limit_error", problem, retryable=False)
        forward = Forward.of(call.headers, call.query)  # beta features; never the client's key
        try:
            response = self.model.create(call.body, lease.role, forward=forward)
        except ModelError as e:
            self._record(lease, call, None, f"{e.status} {e.error_type}: {e.message}", started, t0, done=True)
            raise
        except Exception as e:
            self._record(lease, call, None, f"{type(e).__name__}: {e}", started, t0, done=True)
            raise
        self._record(lease, call, response, None, started, t0, done=True)
        return response

    def _record(
        self,
        lease: _Lease,
        call: ApiCall,
        response: dict[str, Any] | None,
        error: str | None,
        started: float,
        t0: float,
        done: bool = False,
    ) -> None:
        wall = time.monotonic() - t0 if t0 else 0.0
        usage = (response or {}).get("usage") or {}
        tokens_in = int(usage.get("input_tokens") or 0)
        tokens_in += int(usage.get("cache_creation_input_tokens") or 0) + int(
            usage.get("cache_read_input_tokens") or 0
        )
        tokens_out = int(usage.get("output_tokens") or 0)
        exchange = Exchange(call.body, response, error, started, wall, tokens_in, tokens_out, call.streamed)
        model_name = str((response or {}).get("model") or call.body.get("model") or "")
        cost = self._cost(model_name, usage) if response is not None else 0.0
        with self._lock:
            if done:
                self._in_flight -= 1
            lease.exchanges.append(exchange)
            if done:  # a refused call reached no model: it is not a call
                self._usage[(lease.role, lease.round_no)].add(Usage(1, tokens_in, tokens_out, cost))

    def _cost(self, model_name: str, usage: dict[str, Any]) -> float:
        price = price_of(model_name)
        if price is None:
            note = f"no list price for model {model_name!r}: its cost is counted as $0"
            with self._lock:
                if note not in self.notes:
                    self.notes.append(note)
            return 0.0
        p_in, p_out = price
        units = (
            int(usage.get("input_tokens") or 0) * p_in
            + int(usage.get("cache_creation_input_tokens") or 0) * p_in * 1.25
            + int(usage.get("cache_read_input_tokens") or 0) * p_in * 0.1
            + int(usage.get("output_tokens") or 0) * p_out
        )
        return units / 1_000_000


def _budget_message(spent: str, setting: str) -> str:
    return (
        f"harnessopt budget spent: {spent} used (budget.{setting}); "
        f"raise budget.{setting} in harnessopt.yaml or pass --{setting.replace('_', '-')} to allow more"
    )

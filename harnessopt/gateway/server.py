"""The host-side model gateway: the only way a harness or the optimizer reaches a model.

Every sandboxed run gets a *lease*: a fresh random token that the harness uses as its API key
(``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``) against the gateway's URL or Unix socket
(``ANTHROPIC_BASE_URL``; ``OPENAI_BASE_URL`` is it plus ``/v1``). Harnesses may speak the
Messages API, the Chat Completions API or the Responses API; a chat or responses request is
translated to a Messages body (``translate``), which is what the policy, the budget and the transcript see. The
gateway checks the token on the request's headers, before reading its body; checks what the
lease may ask for (``gateway.policy``: its role's model, ``max_tokens``, no server tools);
reserves the most the call can cost against the run's budget; forwards the body to the
upstream ``Model`` of the lease's role (which alone holds the real key); settles the reservation to the real
usage; records the exchange under that token; and counts calls, tokens and list-price cost per
(role, round). ``release(token)`` hands back the recorded exchanges, which are the run's
transcript whatever the harness itself logs. A call whose reservation does not fit the budget
is refused with a 429 that tells the SDK not to retry and the user which setting to raise, so
no budget is exceeded at any concurrency.

Who may connect at all (peer uids, the socket's group), how many connections are served and
how long a client may take to send a request: ``gateway.guard``, configured by ``gateway:``.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harnessopt.config import BudgetConfig, Config, GatewayConfig
from harnessopt.errors import UserError
from harnessopt.gateway.chat_wire import CHAT_PATH
from harnessopt.gateway.guard import Admission, ServerLimits, unused_gid
from harnessopt.gateway.http import (
    COUNT_TOKENS_PATH,
    ApiCall,
    MessagesServer,
    api_key_of,
    estimate_input_tokens,
)
from harnessopt.gateway.policy import (
    PRICES,
    LeasePolicy,
    cost_of,
    forwarded_betas,
    price_of,
    reserve,
)
from harnessopt.gateway.responses_wire import RESPONSES_PATH
from harnessopt.gateway.translate import (
    chat_request_to_messages,
    messages_response_to_chat,
    messages_response_to_responses,
    responses_request_to_messages,
)
from harnessopt.protocols import Exchange, Forward, GatewayLease, Model, ModelError, Usage

__all__ = ["PRICES", "SOCKET_NAME", "Gateway", "price_of"]

SOCKET_NAME = "gateway.sock"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_LEASE_SOCKET_NAME = 23  # "l-" + 16 hex digits + ".sock": one lease's own socket
_BAD_TOKEN = "invalid or expired harnessopt gateway token"
# How the transcript says that a connection was refused for lack of a slot (before any request
# was read): on a listener other runs share (an infrastructure failure: the run is run again),
# or on the run's own socket (only its own connections can have filled it).
SHARED_REFUSED = "harnessopt gateway refused a connection on a listener other runs share"
OWN_REFUSED = "harnessopt gateway refused a connection on this run's own socket"
# how long a call that fits but for the calls in flight waits for them to give their room back
ADMIT_WAIT_S = 60.0
UNANSWERED_IN_A_ROW = (
    5  # upstream calls with no answer in a row (each after the retries): the endpoint is down
)


@dataclass
class _Lease:
    role: str
    round_no: int
    task_id: str | None
    exchanges: list[Exchange] = field(default_factory=list)
    active: int = 0  # calls admitted and not finished
    socket_path: Path | None = None  # its own listener (``Gateway.lease``)


class Gateway:
    """A Messages and Chat Completions API server on loopback TCP (and a Unix socket in ``socket_dir``).

    Thread safe: model calls of different leases run concurrently; bookkeeping is locked.
    ``policy`` says what each role may ask for (default: any model, the budget's ``max_tokens``
    caps, no server tools); ``settings`` bound connections, time, body sizes and peers.
    ``Gateway.from_config`` builds both from a run's config.
    """

    def __init__(
        self,
        model: Model,
        budget: BudgetConfig,
        *,
        socket_dir: Path | None = None,
        policy: LeasePolicy | None = None,
        settings: GatewayConfig | None = None,
        models: Mapping[str, Model] | None = None,
        peer_uids: Iterable[int] = (),
    ):
        self.model = model  # every role's upstream, unless ``models`` names another for the role
        self.models: dict[str, Model] = dict(models or {})
        self.budget = budget
        settings = settings or GatewayConfig()
        self.policy = policy or LeasePolicy.build(budget, settings)
        socket_path = Path(socket_dir) / SOCKET_NAME if socket_dir is not None else None
        if socket_path is not None and len(str(socket_dir)) + 1 + _LEASE_SOCKET_NAME > _MAX_SOCKET_PATH:
            raise UserError(
                f"gateway socket path {socket_path} is too long for a Unix socket; use a shorter directory"
            )
        uids = frozenset({0, os.getuid(), *settings.container_uids, *peer_uids})
        limits = ServerLimits(
            max_connections=settings.max_connections,
            io_timeout_s=settings.io_timeout_s,
            tcp_uids=uids,
            unix_uids=uids,
            socket_gid=_socket_group(settings) if socket_path is not None else None,
        )
        # The socket dir is 0710: a container can connect to the socket it was told of, and
        # cannot list the other leases' sockets (whose names are random).
        self._server = MessagesServer(
            self._handle,
            socket_path=socket_path,
            admit=self._admit,
            limits=limits,
            dir_mode=0o710,
            on_busy=self._tcp_busy,
        )
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)  # a reservation given back
        self._leases: dict[str, _Lease] = {}
        self._usage: dict[tuple[str, int], Usage] = defaultdict(Usage)
        self._held = Usage()  # reservations of the calls in flight
        self._largest: dict[str, Usage] = {}  # by role: the most any one call reserved, per measure
        self._last_refused: Usage | None = None  # the reservation of the last call refused
        self.refusals = 0  # calls refused for the budget: runs that made them say nothing about a candidate
        # upstream calls failed in a row for want of an answer (connection refused, a timeout, 5xx,
        # a rate limit past the retries), and the last one's error: reset by any answered call
        self._unanswered: dict[str, tuple[int, str]] = {}
        self.notes: list[str] = []

    @classmethod
    def from_config(
        cls,
        model: Model,
        cfg: Config,
        *,
        socket_dir: Path | None = None,
        optimizer_model: Model | None = None,
        peer_uids: Iterable[int] = (),
    ) -> Gateway:
        """The gateway of a run: ``cfg``'s budget, per-role models and limits, gateway settings.

        ``model`` is the target's upstream; ``optimizer_model`` the optimizer's (default: the same).
        ``peer_uids``: uids the sandbox's containers run as, besides ``gateway.container_uids``.
        """
        return cls(
            model,
            cfg.budget,
            socket_dir=socket_dir,
            policy=LeasePolicy.from_config(cfg),
            settings=cfg.gateway,
            models={"optimizer": optimizer_model} if optimizer_model is not None else None,
            peer_uids=peer_uids,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Gateway:
        try:
            self._server.start()
        except PermissionError as e:
            gid = self._server.limits.socket_gid
            raise UserError(
                f"cannot give the gateway socket's directory to group {gid} ({e.strerror}); "
                "set gateway.socket_gid to a group you belong to, or leave it unset"
            ) from e
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
        """The Unix socket (0660, group ``socket_gid``, in a 0750 dir) when a ``socket_dir`` was given."""
        return self._server.socket_path

    @property
    def socket_gid(self) -> int | None:
        """The group reserved for the run that owns the socket and its dir (task containers get it)."""
        return self._server.limits.socket_gid

    @property
    def stats(self) -> Any:
        """``gateway.guard.ServerStats``: bytes read from clients, connections refused or timed out."""
        return self._server.stats

    # ------------------------------------------------------------------ leases

    def lease(self, role: str, round_no: int, task_id: str | None = None) -> GatewayLease:
        """A fresh token whose calls are counted for (role, round) and recorded until released.

        With a socket dir, the lease gets its own Unix socket there (a random name, its own
        ``max_connections`` slots): the container it is mounted into reaches the gateway only
        through it, so what one task's connections do cannot refuse another task's calls.
        """
        token = "ho-" + secrets.token_urlsafe(24)
        lease = _Lease(role, round_no, task_id)
        if self.socket_path is not None:
            lease.socket_path = self.socket_path.parent / f"l-{secrets.token_hex(8)}.sock"
            self._server.open_listener(lease.socket_path, on_busy=lambda: self._own_busy(token))
        with self._lock:
            self._leases[token] = lease
        return GatewayLease(token=token, base_url=self.base_url, socket_path=lease.socket_path)

    def recorded(self, token: str) -> list[Exchange]:
        """What a live lease's transcript holds so far (a copy; empty for an unknown token)."""
        with self._lock:
            lease = self._leases.get(token)
            return list(lease.exchanges) if lease else []

    def release(self, token: str) -> list[Exchange]:
        """Forget the token (later calls with it get 401), close its socket, return its exchanges in order."""
        with self._lock:
            lease = self._leases.pop(token, None)
        if lease is not None and lease.socket_path is not None:
            self._server.close_listener(lease.socket_path)
        return lease.exchanges if lease else []

    def release_round(self, role: str, round_no: int) -> int:
        """Forget every lease of (role, round), e.g. the optimizer's at the end of its round.

        Returns how many were released; their exchanges are dropped (the usage stays counted).
        """
        with self._lock:
            tokens = [
                t for t, lease in self._leases.items() if (lease.role, lease.round_no) == (role, round_no)
            ]
            gone = [self._leases.pop(token) for token in tokens]
        for lease in gone:
            if lease.socket_path is not None:
                self._server.close_listener(lease.socket_path)
        return len(tokens)

    # ------------------------------------------------------------------ accounting

    def usage(self) -> dict[tuple[str, int], Usage]:
        """Usage per (role, round), a snapshot."""
        with self._lock:
            return {
                k: Usage(v.calls, v.input_tokens, v.output_tokens, v.cost_usd, v.estimated_calls)
                for k, v in self._usage.items()
            }

    def total(self) -> Usage:
        """Usage of the whole run so far."""
        out = Usage()
        for u in self.usage().values():
            out.add(u)
        return out

    def held(self) -> Usage:
        """What the calls in flight have reserved (calls, token and cost bounds)."""
        with self._lock:
            return Usage(
                self._held.calls, self._held.input_tokens, self._held.output_tokens, self._held.cost_usd
            )

    key_refused: str | None = None
    """Set when an upstream answered 401: the run stops at once (``round.driver.run``)."""

    def upstream_down(self) -> str | None:
        """Why a role's upstream counts as down: its last ``UNANSWERED_IN_A_ROW`` calls got no answer
        (each after the gateway's own retries), none answered since; or None. Runs made meanwhile
        scored 0 for an outage, not for what they ran: no evidence about a candidate."""
        with self._lock:
            for role, (n, last) in sorted(self._unanswered.items()):
                if n >= UNANSWERED_IN_A_ROW:
                    return (
                        f"the {role} model's endpoint stopped answering: its last {n} calls got no answer "
                        f"({last[:200]}); start it again, then run again (the round's runs are no evidence)"
                    )
        return None

    def _answered(self, role: str, error: str | None) -> None:
        """Count an upstream call: answered (``error`` None) or not."""
        with self._lock:
            if error is None:
                self._unanswered.pop(role, None)
            else:
                self._unanswered[role] = (self._unanswered.get(role, (0, ""))[0] + 1, error)

    def exhausted(self) -> str | None:
        """Why the budget refuses further calls (the message callers get), or None.

        A budget is spent when a limit is reached, or once a call was refused because what it
        could cost did not fit what remains, and still does not with what the calls in flight
        hold now (later calls of its kind would not fit either). A refusal only the calls then in
        flight caused (a target run's call while the optimizer's held $0.14) ended a run with 91%
        of its budget left, and said less remained than did (QA).
        """
        with self._lock:
            if problem := self._budget_problem(None):
                return problem
            return self._budget_problem(self._last_refused) if self._last_refused else None

    def cannot_hold(self, ahead: Usage | None = None, growth: float = 1.0) -> str | None:
        """Why the budget left would refuse a call as large as the largest each role has asked for
        in this run (its ``max_tokens`` plus its input: what the gateway reserves), or None. A round
        started without that room has its calls refused partway and fails; the run stops before it
        instead (``round.driver``). ``ahead``: what the round spends before such a call (its train
        rollout); ``growth``: how much larger the call may be than the largest so far (a brief
        grows with the trajectories it quotes)."""
        with self._lock:
            for role, big in sorted(self._largest.items()):
                more = math.ceil(big.input_tokens * (growth - 1.0))  # only the input grows
                # its price, at the call's mean price per token (output is dearer: a bound above)
                usd = big.cost_usd * (1.0 + more / max(big.input_tokens + big.output_tokens, 1))
                need = Usage(big.calls, big.input_tokens + more, big.output_tokens, usd)
                if ahead is not None:
                    need.add(ahead)
                if (problem := self._budget_problem(need)) is not None:
                    return f"one {role} call as large as this run's largest would be refused ({problem})"
        return None

    def reservation(self, role: str, body: dict[str, Any], raw: bytes) -> Usage:
        """What a call reserves: 1 call, its input bound, its ``max_tokens``, their list price.

        ``raw`` is the request body as sent; a ``role`` policy refusal raises ModelError 400.
        """
        max_out = self.policy.check(role, body)
        inp, price = reserve(body, raw, max_out, self.policy.prices)
        return Usage(1, inp, max_out, price)

    def _budget_problem(self, need: Usage | None, held: Usage | None = None) -> str | None:
        """With ``need`` None: whether a limit is reached; else whether ``need`` does not fit beside
        what the calls in flight hold (``held``: instead of theirs)."""
        total = Usage()
        for u in self._usage.values():
            total.add(u)
        b, held = self.budget, self._held if held is None else held
        if b.max_calls is not None and total.calls >= b.max_calls:
            return _budget_message(f"{total.calls} of {b.max_calls} model calls", "max_calls")
        tokens = total.input_tokens + total.output_tokens
        if b.max_tokens is not None and tokens >= b.max_tokens:
            return _budget_message(f"{tokens} of {b.max_tokens} tokens", "max_tokens")
        if b.max_cost is not None and total.cost_usd >= b.max_cost:
            return _budget_message(f"${total.cost_usd:.4f} of ${b.max_cost:.2f}", "max_cost")
        if need is None:
            return None
        if b.max_calls is not None and total.calls + held.calls + need.calls > b.max_calls:
            spent = f"{total.calls} of {b.max_calls} model calls used and {held.calls} in flight"
            return _budget_message(spent, "max_calls")
        held_tokens = held.input_tokens + held.output_tokens
        need_tokens = need.input_tokens + need.output_tokens
        if b.max_tokens is not None and tokens + held_tokens + need_tokens > b.max_tokens:
            left = b.max_tokens - tokens - held_tokens
            return _reserve_message(
                f"{need_tokens} tokens", f"{max(left, 0)} tokens", "max_tokens", b.max_tokens
            )
        if b.max_cost is not None and total.cost_usd + held.cost_usd + need.cost_usd > b.max_cost:
            left_usd = b.max_cost - total.cost_usd - held.cost_usd
            return _reserve_message(
                f"${need.cost_usd:.4f}", f"${max(left_usd, 0):.4f}", "max_cost", b.max_cost
            )
        return None

    # ------------------------------------------------------------------ serving

    def _admit(self, path: str, headers: dict[str, str]) -> Admission:
        """Before any body byte is read: a live token, and a free slot of its lease."""
        with self._lock:
            lease = self._leases.get(api_key_of(headers) or "")
            if lease is None:
                raise ModelError(401, "authentication_error", _BAD_TOKEN)
            limit = self.policy.max_calls_per_lease
            if lease.active >= limit:
                raise ModelError(
                    429,
                    "rate_limit_error",
                    f"this lease already has {limit} calls in flight (gateway.max_calls_per_lease); "
                    "wait for one to finish",
                    retryable=True,
                )
            lease.active += 1
        return Admission(self.policy.of(lease.role).max_body, lease, lambda: self._leave(lease))

    def _own_busy(self, token: str) -> None:
        """A lease's own socket refused a connection: only its own client can have filled it."""
        with self._lock:
            lease = self._leases.get(token)
            if lease is not None:
                self._note_refusal(lease, OWN_REFUSED)

    def _tcp_busy(self) -> None:
        """The shared TCP listener refused a connection: any task using it may have lost a call.

        Who was refused cannot be told (nothing of the request was read), so every live task's
        run is marked, and the runner runs those tasks again (``rollout.runner``). Containers
        cannot reach this port (no network): only local-mode harnesses and host processes can.
        """
        with self._lock:
            for lease in self._leases.values():
                if lease.task_id is not None:
                    self._note_refusal(lease, SHARED_REFUSED)

    def _note_refusal(self, lease: _Lease, mark: str) -> None:
        """Record a refused connection in the lease's transcript (caller holds the lock)."""
        error = (
            f"{mark}: its {self._server.limits.max_connections} slots (gateway.max_connections) were taken"
        )
        if lease.exchanges and lease.exchanges[-1].error == error:
            return  # one mark per burst
        lease.exchanges.append(Exchange({}, None, error, time.time(), 0.0))

    def _leave(self, lease: _Lease) -> None:
        with self._lock:
            lease.active -= 1

    def _handle(self, call: ApiCall) -> dict[str, Any]:
        lease = call.context
        if not isinstance(lease, _Lease):  # only admitted calls reach here
            raise ModelError(401, "authentication_error", _BAD_TOKEN)
        if call.path == COUNT_TOKENS_PATH:
            return {"input_tokens": estimate_input_tokens(call.body)}
        if call.path == CHAT_PATH:  # one canonical form inside: the Messages API's
            try:
                canonical = replace(call, body=chat_request_to_messages(call.body))
            except ModelError as e:
                self._record(lease, call, None, e.message, time.time(), 0.0, None)
                raise
            return messages_response_to_chat(self._forward(lease, canonical))
        if call.path == RESPONSES_PATH:
            cap = self.policy.of(lease.role).max_output_tokens  # Codex sends no max_output_tokens
            try:
                canonical = replace(call, body=responses_request_to_messages(call.body, cap))
            except ModelError as e:
                self._record(lease, call, None, e.message, time.time(), 0.0, None)
                raise
            return messages_response_to_responses(self._forward(lease, canonical), call.body)
        return self._forward(lease, call)

    def _forward(self, lease: _Lease, call: ApiCall) -> dict[str, Any]:
        """Policy, reservation, the role's upstream, settlement and the transcript of one call."""
        started = time.time()
        model = self.models.get(lease.role, self.model)
        try:
            hold = self._reserve(lease, call)
            try:
                model.check(call.body)  # what the upstream cannot take: refused, not a call
            except ModelError:
                self._release(hold)
                raise
        except ModelError as e:
            self._record(lease, call, None, e.message, started, 0.0, None)
            raise
        t0 = time.monotonic()
        forward = self._forward_of(call)
        try:
            response = model.create(call.body, lease.role, forward=forward)
        except ModelError as e:
            self._record(lease, call, None, f"{e.status} {e.error_type}: {e.message}", started, t0, hold)
            if e.status >= 500 or e.status == 429:  # no answer: down, overloaded, out of time
                self._answered(lease.role, f"{e.status} {e.error_type}: {e.message}")
            if e.status == 401:  # upstream refused the real key: no later call can succeed
                self.key_refused = (
                    f"the API key was refused by the {lease.role}'s upstream ({e.message[:200]})"
                )
            raise
        except Exception as e:
            self._record(lease, call, None, f"{type(e).__name__}: {e}", started, t0, hold)
            self._answered(lease.role, f"{type(e).__name__}: {e}")
            raise
        self._answered(lease.role, None)
        self._record(lease, call, response, None, started, t0, hold)
        return response

    def _forward_of(self, call: ApiCall) -> Forward:
        """The client's beta features (those the policy allows), its query; never its key."""
        forward = Forward.of(call.headers, call.query)
        if "anthropic-beta" not in forward.headers:
            return forward
        value, dropped = forwarded_betas(forward.headers["anthropic-beta"], self.policy.allow_server_tools)
        if dropped:
            with self._lock:
                self._note(
                    f"anthropic-beta {', '.join(dropped)} not forwarded: it unlocks features that run on the "
                    "API's side (model.allow_server_tools)"
                )
        headers = {k: v for k, v in forward.headers.items() if k != "anthropic-beta"}
        return replace(forward, headers=headers | ({"anthropic-beta": value} if value else {}))

    def _reserve(self, lease: _Lease, call: ApiCall) -> Usage:
        """Check the lease's policy and hold the call's worst case; 429 when it does not fit."""
        need = self.reservation(lease.role, call.body, call.raw)
        with self._lock:
            big = self._largest.get(lease.role, Usage(1))
            self._largest[lease.role] = Usage(
                calls=1,
                input_tokens=max(big.input_tokens, need.input_tokens),
                output_tokens=max(big.output_tokens, need.output_tokens),
                cost_usd=max(big.cost_usd, need.cost_usd),
            )
            problem = self._budget_problem(need)
            # a call that fits but for the calls in flight waits for them (up to ADMIT_WAIT_S): a
            # target run's call refused while the optimizer's held most of a budget scored a crash
            deadline = time.monotonic() + ADMIT_WAIT_S
            while (
                problem is not None
                and self._held.calls
                and self._budget_problem(need, held=Usage()) is None
                and (wait := deadline - time.monotonic()) > 0
            ):
                self._released.wait(wait)
                problem = self._budget_problem(need)
            if problem is not None and problem.startswith(RESERVE_MARK):
                cap = self.policy.of(lease.role).max_output_tokens
                if need.output_tokens >= cap:  # the cap itself: what a client that names none reserves
                    problem += (
                        f"; its max_tokens is budget.{lease.role}_max_output_tokens ({cap}), which a "
                        f"client that names none (Codex) reserves: lower that setting"
                    )
            if problem is not None:
                self.refusals += 1
                self._last_refused = need
            else:
                self._held.add(need)
        if problem is not None:
            raise ModelError(429, "rate_limit_error", problem, retryable=False)
        return need

    def _record(
        self,
        lease: _Lease,
        call: ApiCall,
        response: dict[str, Any] | None,
        error: str | None,
        started: float,
        t0: float,
        hold: Usage | None,
    ) -> None:
        """Log the exchange; for a forwarded call (``hold``), swap its reservation for its usage."""
        wall = time.monotonic() - t0 if t0 else 0.0
        usage = (response or {}).get("usage") or {}
        tokens_in = int(usage.get("input_tokens") or 0)
        tokens_in += int(usage.get("cache_creation_input_tokens") or 0) + int(
            usage.get("cache_read_input_tokens") or 0
        )
        tokens_out = int(usage.get("output_tokens") or 0)
        estimated = bool(usage.get("estimated"))
        exchange = Exchange(
            call.body, response, error, started, wall, tokens_in, tokens_out, call.streamed, estimated
        )
        model_name = str((response or {}).get("model") or call.body.get("model") or "")
        cost = self._cost(model_name, usage) if response is not None else 0.0
        over = hold is not None and (tokens_in > hold.input_tokens or tokens_out > hold.output_tokens)
        with self._lock:
            lease.exchanges.append(exchange)
            if hold is not None:  # a refused call reached no model: it is not a call
                self._unhold(hold)
                self._usage[(lease.role, lease.round_no)].add(
                    Usage(1, tokens_in, tokens_out, cost, int(estimated))
                )
            if estimated:
                self._note(
                    f"the {lease.role}'s upstream reported no token usage: its token counts (and costs) "
                    "are estimates, characters / 4"
                )
            if (response or {}).get("stop_reason") == "max_tokens":
                self._note(
                    f"a {lease.role} answer was cut off at its max_tokens (truncated; finish_reason "
                    f"'length'): raise budget.{lease.role}_max_output_tokens or the harness's max_tokens"
                )
            if over:
                self._note(
                    f"a {model_name} call used more tokens than its reservation (budgets may be passed)"
                )

    def _release(self, hold: Usage) -> None:
        with self._lock:
            self._unhold(hold)

    def _unhold(self, hold: Usage) -> None:
        """Give back a reservation (caller holds the lock)."""
        self._held.calls -= hold.calls
        self._held.input_tokens -= hold.input_tokens
        self._held.output_tokens -= hold.output_tokens
        self._held.cost_usd -= hold.cost_usd
        if self._held.calls == 0:
            self._held = Usage()  # no float dust left over from the cost sums
        self._released.notify_all()  # a call waiting for room (``_reserve``)

    def _cost(self, model_name: str, usage: dict[str, Any]) -> float:
        cost = cost_of(model_name, usage, self.policy.prices)
        if cost is None:
            with self._lock:
                self._note(f"no list price for model {model_name!r}: its cost is counted as $0")
            return 0.0
        return cost

    def _note(self, note: str) -> None:
        """Add a note once (caller holds the lock)."""
        if note not in self.notes:
            self.notes.append(note)


def _socket_group(settings: GatewayConfig) -> int:
    """The group the socket dir is given to: the configured one, a fresh one as root, else ours."""
    if settings.socket_gid is not None:
        return settings.socket_gid
    if os.geteuid() == 0:
        return unused_gid()  # never root's group: containers get this group as a supplementary one
    return os.getgid()


def _budget_message(spent: str, setting: str) -> str:
    return (
        f"harnessopt budget spent: {spent} used (budget.{setting}); "
        f"raise budget.{setting} in harnessopt.yaml or pass --{setting.replace('_', '-')} to allow more"
    )


RESERVE_MARK = "harnessopt budget: this call may use up to"


def _reserve_message(need: str, left: str, setting: str, limit: float) -> str:
    return (
        f"{RESERVE_MARK} {need} (its max_tokens plus its input) but only "
        f"{left} of budget.{setting}={limit} remain; raise budget.{setting} in harnessopt.yaml or pass "
        f"--{setting.replace('_', '-')} to allow more, or ask for a smaller max_tokens"
    )

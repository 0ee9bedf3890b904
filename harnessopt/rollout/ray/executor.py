"""``rollout.executor: ray``: each task's sandbox runs on a node of a Ray cluster (docs/cluster.md).

The head keeps the lease, the gateway, the budget and the scorer; a Ray task gets the task's
public part and the run's lease token (``rollout.ray.worker.WorkerJob``) and the candidate once per
candidate through the object store (``rollout.ray.worker.Bundle``), runs the node's sandbox, and sends
back the run's outcome and its capped /out, which the head unpacks and scores. Model calls go
from the node's relay to the head's ingress (relay.py). At most ``rollout.concurrency`` tasks are
in flight cluster-wide: the head's pool holds one thread per task in flight.

Faults: a task whose worker or node died raises ``WorkerLost`` (the runner runs it again with a
fresh lease, ``ray.max_retries`` times); no node taking or finishing a task within
``rollout.timeout_s + ray.grace_s``, or the cluster's connection gone, raises ``ClusterLost``
(the round fails, the incumbent stays). Ctrl-C cancels every task in flight; a cancelled task's
sandbox removes its container as it unwinds.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from harnessopt.config import Config
from harnessopt.errors import HarnessoptError, UserError
from harnessopt.protocols import Executor, RunOutput, RunSpec, Sandbox, SandboxCall
from harnessopt.rollout.executors import ClusterLost, PooledExecutor, WorkerLost
from harnessopt.rollout.ray import worker as ray_worker
from harnessopt.rollout.ray.relay import HeadIngress, new_secret
from harnessopt.sandbox.untar import extract

R = TypeVar("R")
POLL_S = 0.25
KEPT_BUNDLES = 4  # candidates whose object refs are kept (a round has two: incumbent and candidate)
CANCEL_WAIT_S = 15.0  # time cancelled tasks get to unwind (remove their containers) on Ctrl-C
CLOSE_WAIT_S = 30.0  # time the nodes get to remove the run's containers and folders at its end


def import_ray() -> Any:
    """The ``ray`` module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "rollout.executor ray needs Ray on this machine: pip install 'harnessopt[ray]'"
        ) from None
    return ray


def ray_executor(cfg: Config, *, sandbox: Sandbox, gateway_url: str) -> Executor:
    """``ray``: each job's sandbox on a node of a Ray cluster; joins (or starts) the cluster now.
    The run's own sandbox is not used: each node builds its own from ``cfg``."""
    return RayExecutor(cfg, gateway_url)


class RayExecutor(PooledExecutor):
    """Runs each task's sandbox as a Ray task; the head keeps everything that must not leave it."""

    name = "ray"

    def __init__(self, cfg: Config, gateway_url: str):
        super().__init__(cfg.rollout.concurrency)
        self.ray = ray = import_ray()
        self.cfg = cfg
        self.max_retries = cfg.ray.max_retries
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            address = cfg.ray.address or os.environ.get("RAY_ADDRESS") or None
            check_reachable(address)  # Ray itself retries a wrong address for minutes, behind its own logs
            try:
                ray.init(
                    address=address, include_dashboard=False, log_to_driver=False, configure_logging=False
                )
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserError(
                    f"cannot join the Ray cluster at {address}: {e}; check ray.address or RAY_ADDRESS"
                    + auth_hint()
                ) from e
        self._remote = ray.remote(ray_worker.run_job).options(num_cpus=cfg.ray.num_cpus, max_retries=0)
        host, port = _host_port(gateway_url)
        self.ingress = HeadIngress((host, port), ray.util.get_node_ip_address(), new_secret())
        self._lock = threading.Lock()
        self._bundles: dict[Path, tuple[str, Any]] = {}  # candidate root -> (digest, object ref)
        self._in_flight: set[Any] = set()
        self._stopping = threading.Event()
        self.shipped = 0  # bundles put in the object store (one per candidate version)
        self.run_id = secrets.token_hex(6)  # names the run's folder on each node (close_node)
        self._submitted = False

    def sandbox_for(self, root: Path) -> SandboxCall:
        """Ships the candidate at ``root`` once (again only when it changed); runs specs on the cluster."""
        bundle = ray_worker.make_bundle(root)
        with self._lock:
            kept = self._bundles.get(root)
            if kept is None or kept[0] != bundle.digest:
                self._bundles.pop(root, None)  # re-inserted last: the newest is evicted last
                kept = self._bundles[root] = (bundle.digest, self.ray.put(bundle))
                self.shipped += 1
                while len(self._bundles) > KEPT_BUNDLES:  # older rounds' candidates leave the store
                    del self._bundles[next(iter(self._bundles))]
        ref = kept[1]
        return lambda spec, out_dir: self._run(ref, spec, out_dir)

    def job(self, spec: RunSpec) -> ray_worker.WorkerJob:
        """What one Ray task is sent: the task's public part, never its answer, scorer or the key."""
        r = self.cfg.rollout
        rollout = r.model_dump(mode="json")
        rollout["concurrency"] = 1  # one warm container per worker process: Ray schedules the rest
        return ray_worker.WorkerJob(
            task=dict(spec.task),
            env=dict(spec.env),
            token=spec.gateway.token,
            timeout_s=spec.timeout_s,
            rollout=rollout,
            ingress=self.ingress.address,
            relay_secret=self.ingress.secret,
            out_cap=r.out_mb * 1024 * 1024,
            run_id=self.run_id,
        )

    def _run(self, bundle_ref: Any, spec: RunSpec, out_dir: Path) -> RunOutput:
        if self._stopping.is_set():
            raise KeyboardInterrupt
        ref = self._remote.remote(self.job(spec), bundle_ref)
        self._submitted = True
        with self._lock:
            self._in_flight.add(ref)
        try:
            result = self._wait(ref, spec.timeout_s + self.cfg.ray.grace_s)
        finally:
            with self._lock:
                self._in_flight.discard(ref)
        out_dir.mkdir(parents=True, exist_ok=True)
        unpacked = extract(
            result.out_tar,
            out_dir,
            max_bytes=self.cfg.rollout.out_mb * 1024 * 1024,
            max_members=ray_worker.OUT_MAX_FILES,
        )
        return RunOutput(
            exit_code=result.exit_code,
            wall_s=result.wall_s,
            out_dir=out_dir,
            stdout_tail=result.stdout_tail,
            stderr_tail=result.stderr_tail,
            error_class=result.error_class,
            notes=[*result.notes, *unpacked.notes("/out/"), f"ran on {result.node}"],
        )

    def _wait(self, ref: Any, deadline_s: float) -> ray_worker.WorkerResult:
        """The task's result; its failures as WorkerLost, ClusterLost or a HarnessoptError."""
        ray, exc = self.ray, self.ray.exceptions
        t_end = time.monotonic() + deadline_s
        try:
            while not ray.wait([ref], timeout=POLL_S)[0]:
                if self._stopping.is_set():
                    raise KeyboardInterrupt
                if time.monotonic() > t_end:
                    ray.cancel(ref)
                    raise ClusterLost(f"no Ray node ran a task within {deadline_s:.0f} s; is the cluster up?")
            result: ray_worker.WorkerResult = ray.get(ref)
            return result
        except exc.TaskCancelledError:
            raise KeyboardInterrupt from None
        except (
            exc.WorkerCrashedError,
            exc.NodeDiedError,
            exc.ObjectLostError,
            exc.LocalRayletDiedError,
        ) as e:
            if not _any_node_alive(ray):
                raise ClusterLost(f"the Ray cluster is gone: {type(e).__name__}") from e
            raise WorkerLost(f"the Ray worker or node running it died ({type(e).__name__})") from e
        except exc.RayTaskError as e:  # the sandbox itself raised on the node: as it would here
            raise HarnessoptError(f"the sandbox failed on a Ray node: {str(e).splitlines()[-1][:300]}") from e
        except (exc.RayError, ConnectionError) as e:
            raise ClusterLost(f"lost the Ray cluster: {type(e).__name__}: {str(e)[:200]}") from e

    def _stop_running(self) -> None:
        """Ctrl-C or a failure: cancel every task in flight and give them time to remove containers."""
        self._stopping.set()
        with self._lock:
            refs = list(self._in_flight)
        for ref in refs:
            try:
                self.ray.cancel(ref)
            except Exception:  # already done, or the cluster is gone
                continue
        if refs:
            with contextlib.suppress(Exception):
                self.ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)

    def gather(self, futures: Sequence[Future[R]]) -> Generator[R, None, None]:
        """As the local pool; a batch after a stopped one starts afresh."""
        self._stopping.clear()
        yield from super().gather(futures)

    def close(self) -> None:
        """Stop the workers, have every node remove the run's containers and folders, stop the
        ingress; leave a cluster we joined, shut down one we started."""
        self.shutdown()
        try:
            self._close_nodes()
        finally:
            self.ingress.close()
            if self._owns_ray:
                self.ray.shutdown()

    def _close_nodes(self) -> None:
        """``close_node`` on every live node, before Ray kills the worker processes (their
        ``atexit`` never runs): their warm containers and unpacked candidates go with the run."""
        if not self._submitted:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        close = ray.remote(ray_worker.close_node)
        refs = []
        with contextlib.suppress(Exception):  # the cluster is gone: nothing of it to reach
            for node in ray.nodes():
                if node.get("Alive"):
                    where = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                    refs.append(
                        close.options(num_cpus=0, max_retries=0, scheduling_strategy=where).remote(
                            self.run_id
                        )
                    )
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_WAIT_S)


def auth_hint() -> str:
    """Where Ray's token file exists and this process does not use it: the likely cause of a join
    that fails at a right address (a cluster Ray started with token authentication refuses a
    driver without the token, behind its own InvalidAuthToken log lines)."""
    if (Path.home() / ".ray" / "auth_token").is_file() and os.environ.get("RAY_AUTH_MODE") != "token":
        return (
            "; if the cluster uses Ray's token authentication (this host has ~/.ray/auth_token), "
            "run harnessopt with RAY_AUTH_MODE=token"
        )
    return ""


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A cluster address (``host:port`` or ``ray://host:port``) must answer as Ray's GCS (or its
    client server) does, a gRPC server, within ``timeout_s``, as ``model.base_url`` must answer:
    else one UserError line, before the run. A port that takes the connection but speaks no HTTP/2
    would leave ``ray.init`` retrying "Failed to get cluster ID from GCS server" for good."""
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep:
        host, port = hostport, "10001" if address.startswith("ray://") else "6379"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            why = _not_grpc(conn, timeout_s)
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
    if why:
        raise UserError(
            f"the Ray cluster at {address} does not answer ({why}); start it (ray start --head) "
            "or fix ray.address / RAY_ADDRESS"
        ) from None


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS
H2_SETTINGS = 4


def _not_grpc(conn: socket.socket, timeout_s: float) -> str:
    """Why the peer is not a gRPC server (Ray's GCS is one), or nothing when it answers an HTTP/2
    preface with its SETTINGS frame, as every gRPC server does at once."""
    conn.settimeout(timeout_s)
    head = b""
    try:
        conn.sendall(H2_PREFACE)
        while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
            head += chunk
    except TimeoutError:
        return f"the port took the connection but said nothing within {timeout_s:.0f} s: is it Ray's port?"
    except OSError:
        pass  # closed or reset: not a gRPC server
    if len(head) < 9 or head[3] != H2_SETTINGS:
        return "the port took the connection but is not a Ray cluster (no gRPC answer): is it Ray's port?"
    return ""


def _any_node_alive(ray: Any) -> bool:
    try:
        return any(n.get("Alive") and n.get("Resources", {}).get("CPU") for n in ray.nodes())
    except Exception:
        return False


def _host_port(url: str) -> tuple[str, int]:
    """(host, port) of ``http://HOST:PORT``."""
    hostport = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return host, int(port)

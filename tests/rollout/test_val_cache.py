"""The val cache key: every input of a rollout or a score is in it, so changing any re-measures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import Config
from harnessopt.protocols import Outcome
from harnessopt.rollout import val_cache as valcache
from harnessopt.rollout.val_cache import ValCache, key_parts
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import make_ws


class Named:
    """A sandbox as the loop holds one: its registry name (and, for Docker, its engine client)."""

    def __init__(self, name: str, client: Any = None, identity: str | None = None):
        self.name, self.client = name, client
        if identity is not None:
            self.identity = identity


class Engine:
    """A docker-py client that knows one image id per tag."""

    def __init__(self, ids: dict[str, str]):
        self.images = self
        self.ids = ids

    def get(self, tag: str) -> Any:
        return type("Image", (), {"id": self.ids[tag]})()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.open(make_ws(tmp_path))


def _parts(ws: Workspace, cfg: Config | None = None, sandbox: object | None = None) -> dict[str, str]:
    return key_parts(ws.repo, "HEAD", cfg or ws.cfg, sandbox or Named("local"))


@pytest.mark.parametrize(
    "path,part",
    [
        ("skill/SKILL.md", "skill"),
        ("harness/run.py", "harness"),
        ("scorer.py", "scorer"),
        ("tasks/val.jsonl", "val_tasks"),
        ("scripted_model.yaml", "model_script"),
    ],
)
def test_a_committed_file_change_changes_the_key(ws: Workspace, path: str, part: str) -> None:
    before = _parts(ws)
    target = ws.root / path
    target.write_text(target.read_text() + "\n# edited\n")
    git(ws.root, "commit", "-qam", f"edit {path}")
    after = _parts(ws)
    assert valcache.changed(before, after) == [part]
    assert valcache.digest(before) != valcache.digest(after)
    if part not in valcache.CONTENT_PARTS:  # the environment changed: the noise floor is measured again
        assert valcache.environment_key(before) != valcache.environment_key(after)
    else:
        assert valcache.environment_key(before) == valcache.environment_key(after)


@pytest.mark.parametrize(
    "section,update,part",
    [
        ("model", {"target": "another-model"}, "model"),
        ("model", {"allow_server_tools": True}, "server_tools"),
        ("model", {"base_url": "http://127.0.0.1:9/v1"}, "base_url"),  # another server, another model
        ("rollout", {"scorer_memory_mb": 4096}, "limits"),  # a scorer that ran out of memory scored 0
        ("rollout", {"warm_interpreter": False}, "limits"),  # a cold interpreter may time out
        ("rollout", {"timeout_s": 61.0}, "limits"),
        ("rollout", {"memory_mb": 2048}, "limits"),
        ("rollout", {"cpus": 2.0}, "limits"),
        ("rollout", {"pids": 256}, "limits"),
        ("rollout", {"out_mb": 32}, "limits"),
        ("rollout", {"output_cap_kb": 128}, "limits"),
        ("rollout", {"scorer_timeout_s": 5.0}, "limits"),
        ("budget", {"target_max_output_tokens": 1000}, "limits"),
        ("gate", {"epochs": 2}, "epochs"),
        ("gate", {"confirm": "holdout"}, "val_subset"),  # the gate sees fewer val tasks
    ],
)
def test_a_config_change_that_affects_rollouts_changes_the_key(
    ws: Workspace, section: str, update: dict[str, Any], part: str
) -> None:
    cfg = ws.cfg.model_copy(update={section: getattr(ws.cfg, section).model_copy(update=update)})
    assert valcache.changed(_parts(ws), _parts(ws, cfg)) == [part]


def test_template_flags_and_provider_are_in_the_key(ws: Workspace) -> None:
    base = _parts(ws)
    assert valcache.changed(base, _parts(ws, ws.cfg.model_copy(update={"template": "tool-agent"}))) == [
        "template"
    ]
    assert valcache.changed(base, _parts(ws, ws.cfg.model_copy(update={"flags": {"x": "1"}}))) == ["flags"]
    other = ws.cfg.model_copy(update={"model": ws.cfg.model.model_copy(update={"provider": "anthropic"})})
    assert valcache.changed(base, _parts(ws, other)) == ["model"]
    # the optimizer's settings do not change a val rollout: same key
    quiet = ws.cfg.model_copy(update={"optimizer": ws.cfg.optimizer.model_copy(update={"max_turns": 3})})
    assert valcache.changed(base, _parts(ws, quiet)) == []


def test_sandbox_kind_and_docker_image_id_are_in_the_key(ws: Workspace) -> None:
    local = _parts(ws, sandbox=Named("local"))
    docker_a = _parts(ws, sandbox=Named("docker", Engine({ws.cfg.rollout.image: "sha256:aaa"})))
    docker_b = _parts(ws, sandbox=Named("docker", Engine({ws.cfg.rollout.image: "sha256:bbb"})))
    assert local["sandbox"] == "local"
    assert docker_a["sandbox"] == f"docker:{ws.cfg.rollout.image}@sha256:aaa"
    assert valcache.changed(local, docker_a) == ["sandbox"]
    assert valcache.changed(docker_a, docker_b) == ["sandbox"]  # the image was rebuilt under one tag
    own = _parts(ws, sandbox=Named("mine", identity="my-sandbox v2"))
    assert own["sandbox"] == "my-sandbox v2"  # a plugged-in sandbox may say who it is


def test_the_cache_misses_after_a_scorer_edit_and_ignores_old_entries(ws: Workspace, tmp_path: Path) -> None:
    cache = ValCache(tmp_path / "state")
    key = cache.key(ws.repo, "HEAD", ws.cfg, Named("local"))
    cache.put(key, {"t": [Outcome(score=1.0)]})
    assert cache.get(key) == {"t": [Outcome(score=1.0)]}
    (ws.root / "scorer.py").write_text((ws.root / "scorer.py").read_text() + "\n# stricter\n")
    git(ws.root, "commit", "-qam", "a stricter scorer")
    assert cache.get(cache.key(ws.repo, "HEAD", ws.cfg, Named("local"))) is None
    # an entry of the old format (task -> runs, an incomplete key) is never read as outcomes
    cache.path.write_text(json.dumps({key: {"t": [{"score": 1.0}]}}))
    assert cache.get(key) is None

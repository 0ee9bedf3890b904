"""Test support: TEMPLATES, make_skill, StatusServer, SKILL_MD (shared by several test modules)."""

from __future__ import annotations

import json
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "workspace_templates"


SKILL_MD = """---
name: geo-facts
description: Answers geography questions.
---
# Geography
Answer with the city name only.
"""


def make_skill(tmp: Path) -> Path:
    skill = tmp / "skill"
    (skill / "references").mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    (skill / "references" / "capitals.md").write_text("France: Paris\nItaly: Rome\n")
    return skill


class StatusServer:
    """A local endpoint answering POSTs with the next of ``replies``: (status, headers, body dict)."""

    def __init__(self, replies: list[tuple[int, dict[str, str], dict]]):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.replies, self.hits = list(replies), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                status, headers, body = outer.replies[len(outer.hits)]
                outer.hits.append((self.path, status))
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"content-type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

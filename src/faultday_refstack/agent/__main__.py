"""``python -m faultday_refstack.agent --port P --config stack/agent.yaml ...``.

Every option has an environment variable ``FAULTDAY_AGENT_<NAME>`` (e.g.
``FAULTDAY_AGENT_LLM_PRIMARY``), so a supervisor can wire addresses either way.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

import uvicorn

from faultday_refstack.agent.app import build_app
from faultday_refstack.agent.config import load_config, select_policy
from faultday_refstack.agent.runtime import Endpoints, Runtime
from faultday_refstack.errors import ConfigError, UsageError
from faultday_wire.webguard import allowed_hosts_from_env

URLS = ("redis", "llm-primary", "llm-backup", "embedder", "qdrant", "tools")


def _env(name: str, default: str = "") -> str:
    return os.environ.get("FAULTDAY_AGENT_" + name.upper().replace("-", "_"), default)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m faultday_refstack.agent")
    p.add_argument("--host", default=_env("host", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("port", "0")))
    p.add_argument("--config", default=_env("config", "stack/agent.yaml"))
    p.add_argument("--policy", default=_env("policy", "default"))
    for name in URLS:
        p.add_argument(f"--{name}", default=_env(name), help=f"base URL of {name}")
    p.add_argument(
        "--llm-canary",
        default=_env("llm-canary"),
        help="base URL of the canary model version (models.canary in the config)",
    )
    p.add_argument(
        "--traces",
        default=_env("traces"),
        help="also write spans to this JSONL file (OTLP: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
    )
    p.add_argument("--audit", default=_env("audit"), help="JSONL audit log")
    p.add_argument("--log-level", default=_env("log_level", "info"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "httpx2", "mcp", "stamina"):  # stamina logs each retry at WARNING
        # One line per request or retry drowns the log; metrics and traces count them.
        logging.getLogger(noisy).setLevel(logging.ERROR)
    missing = [n for n in URLS if not getattr(a, n.replace("-", "_"))]
    if missing:
        p.error("missing dependency URLs: " + ", ".join(f"--{n}" for n in missing))
    try:
        cfg = load_config(Path(a.config))
        policy = select_policy(cfg, a.policy, file=a.config)
    except ConfigError as exc:
        sys.stderr.write(f"invalid agent config:\n{exc}\n")
        raise SystemExit(2) from exc
    if a.llm_canary and cfg.models.canary is None:
        p.error("--llm-canary given but the config has no models.canary")
    # Ours to remove on the way out (under a stack, TMPDIR is in the run folder anyway).
    tmp = tempfile.TemporaryDirectory(prefix="faultday-agent-")
    work = Path(tmp.name)
    try:
        rt = Runtime(
            cfg,
            policy,
            Endpoints(
                redis=a.redis,
                llm_primary=a.llm_primary,
                llm_backup=a.llm_backup,
                embedder=a.embedder,
                qdrant=a.qdrant,
                tools=a.tools,
                llm_canary=a.llm_canary,
            ),
            traces=Path(a.traces) if a.traces else None,
            audit=Path(a.audit) if a.audit else work / "audit.jsonl",
            policy_name=a.policy,
        )
    except UsageError as exc:
        tmp.cleanup()
        p.error(str(exc))
    try:
        app = build_app(rt, listen_host=a.host, allowed_hosts=allowed_hosts_from_env())
        uvicorn.run(app, host=a.host, port=a.port, log_level="warning")
    finally:
        tmp.cleanup()


if __name__ == "__main__":
    main()

"""``python -m faultday.proxy --host H --port P``: how the stack supervisor starts it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faultday.errors import FaultdayError
from faultday.proxy.cli import serve_forever


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faultday.proxy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8474)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    try:
        serve_forever(host=args.host, port=args.port, config=args.config, log_level=args.log_level)
    except FaultdayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

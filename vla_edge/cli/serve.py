"""``vla-edge serve``: a policy over openpi's websocket protocol until interrupted.

The server is :class:`vla_edge.runners.openpi_server.PolicyServer` (the protocol, the
metadata, ``/healthz``, the limits: its module docstring); the runner is
:func:`vla_edge.runners.factory.make_runner`'s, built once the server listens.
"""

from __future__ import annotations

import argparse
import logging
import sys

from vla_edge.core.errors import ProtocolError
from vla_edge.runners.openpi_protocol import DEFAULT_MAX_MESSAGE_BYTES, ProtocolLimits
from vla_edge.runners.openpi_server import PolicyServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge serve``."""
    parser.add_argument(
        "--policy",
        required=True,
        help="what make_runner accepts: 'bundled', a checkpoint file or an export dir",
    )
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--api-key", default=None, help="require 'Authorization: Api-Key K' on connect"
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help=f"largest accepted request (default {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    parser.add_argument(
        "--max-connections", type=int, default=8, help="most simultaneous clients (default 8)"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="intra-op threads of the runner (default 2)"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where a torch checkpoint or torch export runs: cpu, cuda or cuda:N "
        "(checked before the server starts)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve ``args.policy`` until interrupted; ``/healthz`` is 200 once it is loaded."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not 0 <= args.port <= 65535:
        print(f"--port = {args.port}: must be in [0, 65535]", file=sys.stderr)
        return 2
    try:
        limits = ProtocolLimits(max_message_bytes=args.max_message_bytes)
    except ProtocolError as exc:
        print(f"--max-message-bytes: {exc}", file=sys.stderr)
        return 2
    try:
        from vla_edge.runners.factory import make_runner
    except ModuleNotFoundError as exc:
        print(f"'serve' needs vla_edge.runners.factory: {exc}", file=sys.stderr)
        return 2
    if args.device != "cpu":  # a GPU this machine lacks is refused now, not at the first client
        from vla_edge.core.errors import ConfigError
        from vla_edge.runners.torch_device import resolve_device

        try:
            resolve_device(args.device)
        except ConfigError as exc:
            print(f"--device: {exc}", file=sys.stderr)
            return 2
    server = PolicyServer(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        limits=limits,
        max_connections=args.max_connections,
        metadata={"policy": str(args.policy)},
    )
    return server.serve_forever(
        loader=lambda: make_runner(args.policy, threads=args.threads, device=args.device)
    )

"""`pingu gateway`: run the daemon in the foreground (systemd, a container, a terminal)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path

import click

from pingu.config import config_option
from pingu.config.loader import ENV_DB_PATH, ENV_STATE_DIR
from pingu.daemon.app import DEFAULT_GRACE_S

ENV_GRACE = "PINGU_SHUTDOWN_GRACE"
ENV_PROFILE = "PINGU_PROFILE"  # a file: profile the daemon with cProfile, stats written there


def _parse_addr(value: str) -> str:
    """Same rule as `[gateway] addr`: "host:port", ":port" or "[v6]:port"."""
    host, sep, port = value.rpartition(":")
    valid = bool(sep) and port.isdigit() and 0 <= int(port) <= 65535
    if valid and host.startswith("["):
        valid = host.endswith("]") and len(host) > 2
    elif valid:
        valid = ":" not in host and not any(c.isspace() for c in host)
    if not valid:
        raise click.BadParameter(f'expected "host:port" or ":port", got {value!r}')
    return value


@click.command("gateway")
@config_option
@click.option(
    "--addr",
    default=None,
    metavar="HOST:PORT",
    callback=lambda _ctx, _param, value: _parse_addr(value) if value is not None else None,
    help="Listen address of the HTTP gateway; overrides [gateway] addr. Port 0 picks one.",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help=(
        "Overrides [state] dir (workspaces; the database too unless [db] path is set), "
        f"like {ENV_STATE_DIR}, which the systemd unit sets to its StateDirectory."
    ),
)
@click.option(
    "--db",
    "db_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"Overrides [db] path, like {ENV_DB_PATH}.",
)
@click.option(
    "--grace",
    "grace_s",
    type=click.FloatRange(min=0),
    default=DEFAULT_GRACE_S,
    show_default=True,
    envvar=ENV_GRACE,
    metavar="SECONDS",
    help=(
        "On SIGTERM/SIGINT, how long running turns may take to finish before they are "
        f"cancelled (env {ENV_GRACE}). Keep it below systemd's TimeoutStopSec."
    ),
)
def gateway_command(
    config_path: Path | None,
    addr: str | None,
    state_dir: Path | None,
    db_path: Path | None,
    grace_s: float,
) -> None:
    """Run the daemon: enabled channels and the HTTP API, until SIGTERM or SIGINT.

    Exit status: 0 after a clean stop, 1 if it could not start, 2 for a config error.
    """
    from pingu.config.loader import load_config_or_exit

    # The flags act as the environment variables they stand for, so the loader alone
    # decides what follows from them (the database moves with the state directory
    # unless [db] path is set).
    env = dict(os.environ)
    if state_dir is not None:
        env[ENV_STATE_DIR] = str(state_dir.expanduser().absolute())
    if db_path is not None:
        env[ENV_DB_PATH] = str(db_path.expanduser().absolute())
    # The config comes first: a config error exits 2 before anything has started.
    config = load_config_or_exit(config_path, env=env)
    if addr is not None:
        config = dataclasses.replace(config, gateway=dataclasses.replace(config.gateway, addr=addr))

    from pingu.daemon.logging import configure_logging
    from pingu.daemon.notify import Notifier

    configure_logging(config.log.level, config.log.format, config.secrets())
    notifier = Notifier.from_env(os.environ, unset=True)

    import structlog

    from pingu.daemon.app import run_daemon

    log = structlog.get_logger("pingu.daemon")
    log.info(
        "starting",
        pid=os.getpid(),
        config=str(config.path) if config.path else None,
        database=str(config.db.path),
        notify=notifier.enabled,
        watchdog_s=notifier.watchdog_s,
    )
    profile_path = os.environ.get(ENV_PROFILE)
    profiler = None
    if profile_path:  # for benchmarks: the daemon's own CPU profile, written at exit
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        code = asyncio.run(run_daemon(config, grace_s=grace_s, notifier=notifier))
    except Exception:
        # Logged, hence redacted; a raw traceback on stderr could carry a secret.
        log.exception("daemon_crashed")
        code = 1
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile_path)
    sys.exit(code)

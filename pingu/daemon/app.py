"""The daemon behind `pingu gateway`: start everything, run until a signal, stop cleanly.

Lifecycle (in the style of python-telegram-bot's Application):

    initialize()  watchdog pings, open the database (migrating it), mark executions a
                  previous process left running as interrupted, build the runtime, the
                  dispatcher and the enabled channels
    start()       HTTP gateway (answers /healthz 503 meanwhile), channels, then
                  `ready` in the log and READY=1 to systemd
    stop()        STOPPING=1; channels and the gateway take no new messages; running
                  turns get `grace_s` to finish, then are cancelled (and saved as such);
                  channels close; the HTTP server stops
    shutdown()    model clients and the database close

`async with Daemon(...)` does all four. `run_daemon` adds the signal handling: the first
SIGTERM/SIGINT starts a graceful stop, a second one cancels the running turns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import structlog
from aiohttp import web

from pingu.config.model import Config
from pingu.daemon.notify import Notifier

log = structlog.get_logger("pingu.daemon")

DEFAULT_GRACE_S = 20.0  # + channel close + HTTP shutdown: below TimeoutStopSec (45 s)
HTTP_SHUTDOWN_TIMEOUT_S = 3.0  # streams have ended by then: the dispatcher has drained

STARTING = "starting"
READY = "ready"
STOPPING = "stopping"


class StartupError(Exception):
    """The daemon could not start; the message is one line for the log. `exit_code` 2
    means the configuration is wrong (as for a ConfigError), 1 anything else."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        notifier: Notifier | None = None,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.config = config
        self.grace_s = grace_s
        self.notifier = notifier or Notifier(None)
        self._client_factory = client_factory
        self._phase = STARTING
        self.db: Any = None
        self.runtime: Any = None
        self.dispatcher: Any = None
        self.channels: list[Any] = []
        self._started_channels: list[Any] = []
        self._runner: web.AppRunner | None = None
        self.http_host: str | None = None
        self.http_port: int | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._force_stop = asyncio.Event()
        self._stopped = False

    # -- what /healthz sees (pingu.gateway.app.GatewayStatus) ---------------------------

    @property
    def phase(self) -> str:
        return self._phase

    async def health(self) -> dict[str, Any]:
        channels: dict[str, Any] = {}
        for channel in self.channels:
            try:
                channels[channel.name] = channel.status()
            except Exception as exc:  # a broken status must not break the probe
                channels[channel.name] = {"ok": False, "error": type(exc).__name__}
        return {"database": await self._database_health(), "channels": channels}

    async def _database_health(self) -> dict[str, Any]:
        from pingu.store.migrations import schema_version

        try:
            version = await schema_version(self.db.read())
        except Exception as exc:
            return {"ok": False, "error": type(exc).__name__}
        return {"ok": True, "schema_version": version}

    # -- lifecycle ----------------------------------------------------------------------

    async def initialize(self) -> None:
        if self.notifier.enabled and self.notifier.watchdog_s:
            self._watchdog = asyncio.create_task(self._ping_watchdog(), name="sd-watchdog")
        from pingu.agent.runtime import AgentRuntime
        from pingu.dispatcher import Dispatcher
        from pingu.store.db import Database
        from pingu.store.errors import StoreError

        self.notifier.status("opening the database")
        try:
            self.db = await Database.open(self.config.db.path)
        except (StoreError, OSError) as exc:
            raise StartupError(f"cannot open the database {self.config.db.path}: {exc}") from exc
        interrupted = await self.db.executions.mark_interrupted()
        if interrupted:
            log.warning("executions_interrupted", count=interrupted)
        else:
            log.info("executions_interrupted", count=0)

        kwargs = {"client_factory": self._client_factory} if self._client_factory else {}
        self.runtime = AgentRuntime(self.config, self.db, **kwargs)
        self.dispatcher = Dispatcher(self.runtime)

        enabled = [c for c in self.config.channels.values() if c.enabled]
        if enabled:
            # Imported only when needed: python-telegram-bot is heavy.
            from pingu.channels import build_channel

            for channel_config in enabled:
                try:
                    channel = build_channel(
                        channel_config,
                        config=self.config,
                        dispatcher=self.dispatcher,
                        db=self.db,
                        runtime=self.runtime,
                    )
                except ValueError as exc:
                    raise StartupError(str(exc), exit_code=2) from exc
                self.channels.append(channel)

    async def start(self) -> None:
        await self._start_http()
        for channel in self.channels:
            self.notifier.status(f"starting channel {channel.name}")
            try:
                await channel.start()
            except ValueError as exc:
                # A channel's settings are wrong (e.g. Telegram refused the bot token):
                # the channel's one-line message names the key, never the secret.
                raise StartupError(str(exc), exit_code=2) from None
            self._started_channels.append(channel)
            log.info("channel_started", channel=channel.name)
        self._phase = READY
        log.info(
            "ready",
            http_host=self.http_host,
            http_port=self.http_port,
            channels=[c.name for c in self.channels],
            grace_s=self.grace_s,
        )
        self.notifier.ready(f"ready; HTTP on {self.http_host}:{self.http_port}")

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._phase = STOPPING
        self.notifier.stopping("stopping: finishing running turns")
        log.info("stopping", grace_s=self.grace_s)
        started = time.monotonic()
        for channel in self._started_channels:
            await _quietly(channel.stop_receiving(), "channel_stop_receiving_failed", channel)
        if self.dispatcher is not None:
            await self._drain()
        for channel in self._started_channels:
            await _quietly(channel.close(), "channel_close_failed", channel)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        log.info("stopped", duration_ms=round((time.monotonic() - started) * 1000, 1))

    async def shutdown(self) -> None:
        if self.runtime is not None:
            await _quietly(self.runtime.close(), "runtime_close_failed")
        if self.db is not None:
            await self.db.close()
            self.db = None
            log.info("database_closed")
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        self.notifier.close()

    async def __aenter__(self) -> Daemon:
        try:
            await self.initialize()
            await self.start()
        except BaseException:
            await self.stop()
            await self.shutdown()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        await self.shutdown()

    # -- signals ------------------------------------------------------------------------

    def request_stop(self, reason: str = "request") -> None:
        """First call: stop gracefully. Second call: cancel running turns now."""
        if not self._stop_requested.is_set():
            log.info("stop_requested", reason=reason)
            self._stop_requested.set()
        elif not self._force_stop.is_set():
            log.warning("stop_forced", reason=reason)
            self._force_stop.set()

    async def wait_for_stop(self) -> None:
        await self._stop_requested.wait()

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    # -- internals ----------------------------------------------------------------------

    async def _start_http(self) -> None:
        from pingu.gateway.app import create_app

        gateway = self.config.gateway
        app = create_app(
            config=self.config,
            dispatcher=self.dispatcher,
            runtime=self.runtime,
            db=self.db,
            status=self,
        )
        # No access log: SSE requests are long, and the per-turn log line says more.
        runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT_S, handle_signals=False
        )
        await runner.setup()
        self._runner = runner
        site = web.TCPSite(runner, gateway.host, gateway.port)
        try:
            await site.start()
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {gateway.host}:{gateway.port}: {exc.strerror or exc}"
            ) from exc
        host, port = runner.addresses[0][:2]
        self.http_host, self.http_port = host, port
        if gateway.token:
            log.info("http_listening", host=host, port=port, auth="bearer")
        else:
            log.warning(
                "http_listening",
                host=host,
                port=port,
                auth="none",
                note="no [gateway] token configured: listening on 127.0.0.1 only",
            )

    async def _drain(self) -> None:
        drain = asyncio.create_task(self.dispatcher.drain(self.grace_s), name="drain")
        forced = asyncio.create_task(self._force_stop.wait(), name="force-stop")
        try:
            await asyncio.wait({drain, forced}, return_when=asyncio.FIRST_COMPLETED)
            if not drain.done():
                # A second signal: cancel what still runs; the cancelled turns are saved.
                await self.dispatcher.drain(0)
            await drain
        finally:
            forced.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forced

    async def _ping_watchdog(self) -> None:
        # Runs on the event loop on purpose: if the loop is stuck the pings stop and
        # systemd restarts the service.
        interval = self.notifier.watchdog_s or 1.0
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)


async def _quietly(awaitable: Any, event: str, channel: Any = None) -> None:
    """Run a shutdown step; a failure is logged and shutdown continues."""
    try:
        await awaitable
    except Exception:
        log.exception(event, channel=getattr(channel, "name", None))


async def run_daemon(
    config: Config,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    notifier: Notifier | None = None,
    client_factory: Callable[..., Any] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; the process exit code (0 clean stop, 1 failed start,
    2 a channel's settings refused at start)."""
    daemon = Daemon(config, grace_s=grace_s, notifier=notifier, client_factory=client_factory)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, daemon.request_stop, sig.name)
    try:
        # Startup races the stop request: a SIGTERM during a slow start still stops.
        starting = asyncio.create_task(daemon.__aenter__(), name="daemon-start")
        stop_wait = asyncio.create_task(daemon.wait_for_stop(), name="stop-wait")
        await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            log.info("start_aborted")
            return 0
        except StartupError as exc:
            log.error("startup_failed", error=str(exc))
            daemon.notifier.status(f"failed to start: {exc}")
            return exc.exit_code
        try:
            await stop_wait
        finally:
            await daemon.__aexit__(None, None, None)
        log.info("exit", code=0)
        return 0
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)

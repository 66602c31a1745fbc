"""What Pingu's aiohttp clients share (the Telegram Bot API, the model client's transport)."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

ProxySetting = tuple[URL | None, aiohttp.BasicAuth | None]


class EnvProxies:
    """HTTP(S)_PROXY / NO_PROXY from the environment, as httpx honours them, looked up once
    per origin.

    aiohttp's own `trust_env` would do the same lookup, and read ~/.netrc, in a worker
    thread for every request; here it happens in a worker thread once per origin."""

    __slots__ = ("_by_origin",)

    def __init__(self) -> None:
        # "scheme://host:port" -> (proxy URL, proxy auth), (None, None) for a direct connection
        self._by_origin: dict[str, ProxySetting] = {}

    async def for_url(self, url: str) -> ProxySetting:
        origin = "/".join(url.split("/", 3)[:3])
        found = self._by_origin.get(origin)
        if found is None:
            try:
                found = await asyncio.to_thread(get_env_proxy_for_url, URL(origin))
            except LookupError:
                found = (None, None)
            self._by_origin[origin] = found
        return found

    def clear(self) -> None:
        self._by_origin.clear()

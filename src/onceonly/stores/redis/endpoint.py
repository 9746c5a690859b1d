"""A Redis store URL (onceonly's own options already taken out) -> how the
store reaches the server: one node, or a cluster with ``cluster=1``.

Cluster mode is explicit, not discovered: discovering it costs a round trip
on every cold start, and a wrong guess changes where keys go. A mismatch is a
ConfigError either way: a plain URL at a cluster node, on setup() (INFO
cluster) or at the first MOVED reply, which proves the script did not run;
``cluster=1`` at a plain node, when the topology is read on first use.

TLS is ``rediss://``; the server's certificate is verified (redis-py's
default, ``ssl_cert_reqs=required``, which the URL cannot turn off) against
the system's CAs or the bundle in ``ssl_ca_certs=PATH``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.cluster import RedisCluster
from redis.connection import parse_url

from ...errors import ConfigError
from .cluster import ClusterNodes
from .nodes import Nodes, OneNode

# redis-py's own name for a CA bundle file, passed through to every connection.
CA_OPTION = "ssl_ca_certs"


def _check_tls(url: str) -> None:
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    ca_file = options.get(CA_OPTION)
    if ca_file is None:  # with redis:// the option is refused already (options.py)
        return
    if not Path(ca_file).is_file():
        raise ConfigError(f"redis option {CA_OPTION}: no CA bundle file at {ca_file!r}")


def _check_cluster_database(url: str, parsed: dict[str, object]) -> None:
    """A cluster has database 0 only (SELECT is refused, as on ElastiCache
    Serverless): any other number is a ConfigError, not a surprise at runtime.
    ``/0`` names that one database and sends no SELECT, so it is accepted."""
    if parsed.get("db", 0) != 0:
        raise ConfigError(
            f"a Redis Cluster has only database 0 (SELECT is refused there), but the URL names database"
            f" {parsed['db']}: drop the /N path or db= option from {urlsplit(url)._replace(query='').geturl()!r}"
        )


def nodes_from_url(url: str, *, cluster: bool, half_timeout: float) -> Nodes:
    """``half_timeout`` bounds connecting and each reply (the URL's own
    ``socket_timeout``/``socket_connect_timeout`` win)."""
    _check_tls(url)
    try:
        parsed = parse_url(url)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"malformed Redis URL: {exc}") from exc
    timeouts = {"socket_connect_timeout": half_timeout, "socket_timeout": half_timeout}
    if not cluster:
        try:
            return OneNode(redis.Redis.from_url(url, **timeouts))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"malformed Redis URL: {exc}") from exc
    _check_cluster_database(url, parsed)
    socket_timeout = float(parsed.get("socket_timeout", half_timeout))  # type: ignore[arg-type]
    # The client reads the topology when built: on first use, not at import.
    tls = urlsplit(url).scheme.lower() == "rediss"
    return ClusterNodes(lambda: RedisCluster.from_url(url, **timeouts), socket_timeout, budget=2 * half_timeout,
                        tls=tls)

"""Where the server is and who you are: flags, then the environment, then a config file.

The config file (``$XDG_CONFIG_HOME/kq/config``, by default ``~/.config/kq/config``, or
the file named by ``KQ_CONFIG``) is INI text::

    [kq]
    url = https://queue.example.com
    token = kq_...

The token is a secret: kq refuses a config file that others may read.
"""

from __future__ import annotations

import configparser
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kq.errors import Exit, KqError

SECTION = "kq"


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def config_path() -> Path:
    named = os.environ.get("KQ_CONFIG")
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kq" / "config"


def _read_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KqError(
            f"{path} holds a token but others may read it; run: chmod 600 {path}", Exit.USAGE
        )
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as exc:
        raise KqError(f"{path}: {exc}", Exit.USAGE) from exc
    if not parser.has_section(SECTION):
        raise KqError(f"{path} has no [{SECTION}] section (see docs/cli.md).", Exit.USAGE)
    return dict(parser[SECTION])


def load(url: str | None = None) -> Config:
    """The configuration in force; a clear error when something is missing or wrong."""
    path = config_path()
    url = url or os.environ.get("KQ_URL", "")
    token = os.environ.get("KQ_TOKEN", "")
    if not (url and token):  # the file is read only for what the environment lacks
        from_file = _read_file(path)
        url = url or from_file.get("url", "")
        token = token or from_file.get("token", "")
    if not url:
        raise KqError(
            f"No server: set KQ_URL, pass --url, or write url = ... in {path}.", Exit.USAGE
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise KqError(f"KQ_URL must be an http(s) address, not {url!r}.", Exit.USAGE)
    if not token:
        raise KqError(
            f"No token: set KQ_TOKEN or write token = ... in {path} "
            "(make one with `manage.py create_token <user>` or on the Tokens page).",
            Exit.USAGE,
        )
    return Config(url=url.rstrip("/"), token=token.strip())

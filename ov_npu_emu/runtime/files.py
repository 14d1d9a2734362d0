"""Files we write (blobs, cache entries, exports, reports): atomic, and never through a symlink.

A model folder may come from anywhere, and a symlink in it (``openvino_model.blob ->
~/.bashrc``) must not redirect a write.  :func:`write_file` writes a fresh temporary file beside
the target (``mkstemp``: created exclusively, so not a link) and renames it over the target: the
rename replaces a symlink itself rather than the file it points to, and a reader never sees half
a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_file"]


def write_file(path: str | os.PathLike[str], data: bytes | str, *, encoding: str = "utf-8") -> None:
    """Write ``data`` to ``path`` atomically; a symlink at ``path`` is replaced, not followed."""
    target = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

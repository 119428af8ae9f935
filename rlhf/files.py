"""Files a run writes whole or not at all."""

import json
import os


def write_json(path, data):
    """Write `data` to `path` as JSON: to a temporary file first, then renamed over it, so that a crash never leaves
    half a file (a manifest, a report)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)

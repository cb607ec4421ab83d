"""A node agent's uploader alone in a process, for tests that kill it mid-upload:
`python -m tests.support.upload_worker JOB_ID ATTEMPT RECORD_JSON FOLDER` (settings from
AMPFLEET_*; FOLDER: where the record may name files)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ampfleet.core.settings import get_settings
from ampfleet.workers.uploads import ArtifactUploader

UPLOAD_LIMIT_S = 300


def main() -> None:
    job_id, attempt, record = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    uploader = ArtifactUploader(get_settings())
    uploader.start()
    uploader.submit((job_id, attempt), [record], [Path(sys.argv[4])])
    deadline = time.monotonic() + UPLOAD_LIMIT_S
    while not uploader.settled((job_id, attempt)) and time.monotonic() < deadline:
        time.sleep(0.05)
    uploader.stop(timeout=10)


if __name__ == "__main__":
    main()

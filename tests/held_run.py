"""``python -m tests.held_run HELD_FILE LABEL ROWS ARGS...``: the command ``fedsim ARGS...``,
held once the run LABEL has written ROWS metrics rows: it creates HELD_FILE and waits there
for a signal. A signal test waits for HELD_FILE (a state) before it signals, so the run
cannot end before it is interrupted however busy the machine is, and the signal lands at a
known point of a known run."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from fedsim.cli import main
from fedsim.results.recorder import Recorder


def hold_after(label: str, rows: int, held_file: Path) -> None:
    """Make every Recorder of run ``label`` stop after its ``rows``-th metrics row until a
    signal's handler raises (Ctrl-C's KeyboardInterrupt, fedsim's SIGTERM handler)."""
    log_evaluation = Recorder.log_evaluation

    def held(self: Recorder, *args: object, **kwargs: object) -> dict:
        row = log_evaluation(self, *args, **kwargs)
        if self.label == label and len(self._rows) == rows:
            held_file.touch()
            while True:
                signal.pause()
        return row

    Recorder.log_evaluation = held


if __name__ == "__main__":
    held_file, label, rows, *args = sys.argv[1:]
    hold_after(label, int(rows), Path(held_file))
    sys.exit(main(args))

"""How ``rltrainer train`` shows its progress: one line per iteration."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from rltrainer.commands.common import UsageError


class ProgressReporter:
    """One line per iteration: an aligned table on a terminal, ``key=value`` lines otherwise."""

    COLUMNS = (  # header, result key, format, table width
        ("iter", "training_iteration", "{:.0f}", 6),
        ("timesteps", "timesteps_total", "{:.0f}", 11),
        ("return", "episode_return_mean", "{:.2f}", 10),
        ("steps/s", "num_env_steps_sampled_per_s", "{:.0f}", 9),
        ("time s", "time_total_s", "{:.1f}", 9),
    )

    def __init__(self, out: IO[str], tty: bool, intro: str = "", restore: str | None = None) -> None:
        self.out = out
        self.tty = tty
        self.intro = intro
        self.restore = restore
        """``--restore``'s checkpoint: training must start from it, never fresh or from another."""
        self._header_done = False

    def on_resume(self, checkpoint: str | None) -> None:
        if self.restore is not None and checkpoint != self.restore:
            raise UsageError(f"--restore {self.restore}: not restored (the warning above says why)")
        if checkpoint is None:
            print("no checkpoint to resume from: starting fresh", file=self.out, flush=True)
        else:
            print(f"resuming from {checkpoint}", file=self.out, flush=True)

    def on_start(self, trial_dir: Path | str) -> None:
        if self.intro:
            print(self.intro, file=self.out)
        print(f"trial directory: {trial_dir}", file=self.out, flush=True)

    def on_result(self, result: dict[str, Any]) -> None:
        cells = [fmt.format(result.get(key, float("nan"))) for _, key, fmt, _ in self.COLUMNS]
        if not self.tty:
            line = " ".join(
                f"{header.replace(' ', '_')}={cell}"
                for (header, *_), cell in zip(self.COLUMNS, cells, strict=True)
            )
        else:
            if not self._header_done:
                print(" ".join(h.rjust(w) for h, _, _, w in self.COLUMNS), file=self.out)
                self._header_done = True
            line = " ".join(cell.rjust(w) for (*_, w), cell in zip(self.COLUMNS, cells, strict=True))
        print(line, file=self.out, flush=True)

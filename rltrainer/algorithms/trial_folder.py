"""Where an algorithm's results go: ``<storage_path>/<experiment_name>/<trial_id>/`` (a
folder, or an ``s3://`` prefix cached locally and uploaded after every iteration), and the
result logger that writes them there. A mixin of ``Algorithm``.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from rltrainer.results import ResultLogger
from rltrainer.storage import check_experiment_name, is_remote, join_uri, open_storage


class TrialFolder:
    """``Algorithm``'s results folder (see the module docstring)."""

    @property
    def experiment_uri(self) -> str:
        """``<storage_path>/<experiment_name>``: a directory or an ``s3://`` URI."""
        name = self.config.experiment_name
        if name is None:
            return join_uri(self.config.storage_path, f"{type(self).__name__}_{self.config.env_name}")
        return join_uri(self.config.storage_path, check_experiment_name(name, "experiment_name"))

    @property
    def trial_uri(self) -> str:
        """``<storage_path>/<experiment_name>/<trial_id>``: where results and checkpoints go."""
        if self._trial_uri is None:
            stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            trial_id = f"{type(self).__name__}_{self.config.env_name}_{stamp}_{secrets.token_hex(2)}"
            self._trial_uri = join_uri(self.experiment_uri, trial_id)
        return self._trial_uri

    @property
    def trial_dir(self) -> Path:
        """The local folder results are written to: ``trial_uri`` itself, or for ``s3://``
        storage a temporary cache uploaded after every iteration (removed by ``stop()``)."""
        if not is_remote(self.trial_uri):
            return Path(self.trial_uri)
        if self._cache_dir is None:
            self._cache_dir = Path(tempfile.mkdtemp(prefix="rltrainer_trial_"))
        return self._cache_dir

    logdir = trial_dir

    def _log_result(self, result: dict[str, Any]) -> None:
        if self._result_logger is None:
            remote = is_remote(self.trial_uri)
            storage = open_storage(self.trial_uri, self.config.storage_options) if remote else None
            self._result_logger = ResultLogger(
                self.trial_dir,
                self.config.to_dict(),
                storage,
                self.config.logger_config,
                resumed_at=self._resumed_at,
            )
        self._result_logger.log(result)

    def _remove_cache(self) -> None:
        if self._cache_dir is not None:
            shutil.rmtree(self._cache_dir, ignore_errors=True)
            self._cache_dir = None

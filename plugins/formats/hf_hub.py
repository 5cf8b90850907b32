"""Model folders and the Hugging Face Hub, through ``huggingface_hub``'s own API.

- :func:`cached_folder`: a repo id (``owner/name``) as the folder of its newest snapshot in
  the local Hugging Face cache (``HF_HOME``/``HF_HUB_CACHE``), found with
  ``snapshot_download(..., local_files_only=True)``: the cache only, never the network, so
  ``trm.load("owner/name")`` and ``trm solve owner/name PUZZLE`` work offline
  (``HF_HUB_OFFLINE=1``) once the repo was downloaded (``hf download owner/name``).
- :func:`push_folder`: ``trm export RUN --format hf --out DIR --push-to-hub REPO`` uploads
  the folder it wrote with ``HfApi.create_repo(exist_ok=True)`` and ``HfApi.upload_folder``,
  as the token ``hf auth login`` saved (or ``HF_TOKEN``) allows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trm.errors import TrmError


def is_repo_id(text: str) -> bool:
    """True for ``owner/name`` as the Hub spells a repo id (one slash, each part of letters,
    digits, ``-``, ``_``, ``.``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if text.count("/") != 1 or text.startswith((".", "~", "/")) or text.endswith("/"):
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def check_repo_id(text: str) -> str:
    """``text`` when it is a repo id; TrmError for ``--push-to-hub`` otherwise."""
    if not is_repo_id(text):
        raise TrmError(
            f"--push-to-hub {text}: not a Hub repo id; give OWNER/NAME (letters, digits, "
            "'-', '_' and '.')"
        )
    return text


def cached_folder(name: str) -> Path | None:
    """The folder of the cached snapshot of the Hub model ``name`` (a repo id), None when
    ``name`` is not a repo id; TrmError when it is one but is not in the cache."""
    if not is_repo_id(name):
        return None
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        found = snapshot_download(name, repo_type="model", local_files_only=True)
    except LocalEntryNotFoundError:
        raise TrmError(
            f"{name} is neither a path here nor a model in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}); give a run directory, a checkpoint file or a model "
            f"folder, or download the repo first (hf download {name}): trm reads the cache, "
            "never the network"
        ) from None
    return Path(str(found))


def push_folder(folder: Path, repo_id: str, api: Any = None) -> str:
    """Upload every file of ``folder`` to the Hub model repo ``repo_id`` (created when it
    does not exist) and return the commit's URL. ``api`` is an ``HfApi`` (tests give a
    fake). TrmError, in one line, when the Hub refuses (no token, no access, no network)."""
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi()
    try:
        api.create_repo(repo_id, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            repo_type="model",
            commit_message=f"trm export --format hf ({folder.name})",
        )
    except Exception as exc:  # HTTP, token and connection errors of huggingface_hub
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TrmError(
            f"--push-to-hub {repo_id}: the Hub refused the upload ({first}); {folder} was "
            "written and can be uploaded again with: hf upload "
            f"{repo_id} {folder} (log in first with: hf auth login)"
        ) from None
    return str(getattr(commit, "commit_url", "") or f"https://huggingface.co/{repo_id}")

"""Where a store's artefacts are: perf.data, kallsyms and the run folders, stored as paths relative
to the store's folder (or a PostgreSQL store's artefact folder)."""
from __future__ import annotations

import os
from pathlib import Path

from kperfdiff.store import backend
from kperfdiff.store.connection import Connection


class Artefacts(Connection):
    """Stored artefact paths, and where they are now. Artefacts (perf.data, kallsyms, the run folders)
    are kept relative to the store's folder, so a store copied or moved with its .artefacts folder works
    from any directory and on any machine. Paths outside the folder stay absolute."""

    def stored_path(self, path: str | Path) -> str:
        p = Path(os.path.abspath(path))
        try:
            return p.relative_to(self.dir).as_posix()
        except ValueError:
            return str(p)

    def artefact_path(self, text: str | None) -> Path | None:
        """Where a stored artefact path is now. Paths written by older kperfdiff versions (relative to
        the directory the run started in, or absolute) are found again through their
        ``NAME.artefacts`` folder beside the store when the store has moved."""
        if not text:
            return None
        return self._find(text) or self._here(text)

    def _artefact_text(self, text: str, folders: dict[str, str]) -> str:
        """``str(artefact_path(text))`` for one file of a listing (a run's profiles, a page of runs),
        looking at the disk once per folder rather than once per file: ``folders`` keeps where each
        folder is (a file is where its folder is; where no folder of that name is, no file is either)."""
        head, _, name = text.rpartition("/")
        if not head or name in ("", ".", ".."):
            return str(self.artefact_path(text))
        if head not in folders:
            found = self._find(head)
            folders[head] = str(found if found is not None else self._here(head))
        return f"{folders[head]}/{name}"

    def _here(self, text: str) -> Path:
        p = Path(text)
        return p if p.is_absolute() else self.dir / p

    def _find(self, text: str) -> Path | None:
        """The first place a stored artefact path exists: beside the store, in its moved
        ``.artefacts`` folder, or relative to the current directory (older versions); None if nowhere."""
        p = Path(text)
        here = self._here(text)
        if here.exists():
            return here
        parts = p.parts
        for i in range(len(parts) - 1, -1, -1):
            if parts[i].endswith(".artefacts"):
                moved = self.dir.joinpath(*parts[i:])
                if moved.exists():
                    return moved
                break
        if not p.is_absolute() and p.exists():
            return Path(os.path.abspath(p))
        return None

    def artefact_root(self) -> Path:
        """Where the run folders go: ``NAME.artefacts`` beside an SQLite file; a PostgreSQL store's
        artefact folder."""
        return self.dir if self.postgres else self.dir / (self.path.stem + ".artefacts")

    def set_artefact_folder(self, artefacts: str) -> str:
        """Record the artefact folder of a PostgreSQL store (``kperfdiff store init --artefacts``)."""
        root = backend.artefact_dir(artefacts, str(self.path))
        self._write(lambda: self.conn.execute(
            "INSERT INTO meta VALUES ('artefacts', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (root,)))
        self.dir = Path(root)
        return root

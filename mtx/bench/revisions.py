"""Other revisions of mtx (``--impl mtx@REV``): a temporary detached git worktree of this checkout
per revision, removed at exit. A child started there with ``python -m mtx.bench`` runs that
revision's code (the working directory comes first on ``sys.path``)."""
import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]  # the checkout mtx runs from
_checkouts = {}  # revision -> worktree path


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def checkout(revision):
    """The worktree of ``revision`` (made on first use); ConfigError when there is none."""
    if revision not in _checkouts:
        commit = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
        if commit.returncode != 0:
            raise ConfigError(f"--impl mtx@{revision}: no such git revision in {ROOT} (measure "
                              f"other revisions from a clone; see `git log --oneline`)")
        tree = Path(tempfile.mkdtemp(prefix="mtx-bench-rev-")) / "tree"
        added = _git("worktree", "add", "--detach", str(tree), commit.stdout.strip())
        if added.returncode != 0:
            raise ConfigError(f"--impl mtx@{revision}: git worktree add failed "
                              f"({(added.stderr.strip().splitlines() or [''])[-1]})")
        _checkouts[revision] = tree
        atexit.register(lambda: (_git("worktree", "remove", "--force", str(tree)),
                                 shutil.rmtree(tree.parent, ignore_errors=True)))
    return _checkouts[revision]

"""Other revisions of mtx for the benchmark (``--impl mtx@REV``): each a temporary detached git
worktree of this checkout, made once per process and removed at exit. A child started there with
``python -m mtx.bench`` imports that revision's package (the working directory comes first on
``sys.path``) and builds that revision's native kernels into the shared kernel cache."""
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
    """The path of a worktree of ``revision`` (made on first use); ConfigError when this mtx is
    not a git checkout or the revision does not exist."""
    if revision not in _checkouts:
        if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
            raise ConfigError(f"--impl ...@{revision}: {ROOT} is not a git checkout; measure "
                              f"other revisions from a clone of the repository")
        commit = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
        if commit.returncode != 0:
            raise ConfigError(f"--impl ...@{revision}: no such git revision in {ROOT}; "
                              f"see `git log --oneline`")
        tree = Path(tempfile.mkdtemp(prefix="mtx-bench-rev-")) / "tree"
        added = _git("worktree", "add", "--detach", str(tree), commit.stdout.strip())
        if added.returncode != 0:
            raise ConfigError(f"--impl ...@{revision}: git worktree add failed "
                              f"({(added.stderr.strip().splitlines() or [''])[-1]})")
        _checkouts[revision] = tree
        atexit.register(_remove, tree)
    return _checkouts[revision]


def _remove(tree):
    _git("worktree", "remove", "--force", str(tree))
    shutil.rmtree(tree.parent, ignore_errors=True)

"""The words for a framework found installed that the guard cannot serve: a module named like
one whose version cannot be read, or one too old, each named with the folder Python imports
it from (a second copy on ``PYTHONPATH`` is a common cause), the version read and the fix."""


def framework_version_unreadable(module: str, path: str, to_install: str) -> str:
    return (f'mmdet3d_ddp_guard: Python imports {module!r} from {path}, but neither that folder '
            '(version.py, __version__.py, version.info) nor an installed distribution says its '
            f'version, so the guard cannot tell which framework it is. Fix: install {to_install} '
            f'(or remove that folder from sys.path/PYTHONPATH if it is a stray copy), or give '
            f"{path} a version.py with __version__ = 'X.Y.Z'.")


def framework_too_old_at(refusal: str, module: str, path: str) -> str:
    """``refusal``: the row's ``too_old`` text, its version filled in."""
    return f'{refusal} (Python imports {module!r} from {path}.)'

"""Which framework's training a config is written for, read from its source without running it.

``check`` simulates a config with the adapter of its framework: the installed one where only
one is, else the one its top-level keys name (:func:`framework_of_config`), read by
:func:`config_file_keys` from the config and its ``_base_`` files with :mod:`ast`, so that
neither framework has to read it first.
"""
import ast
import os.path as osp
from typing import Any, Dict, Mapping, Optional, Tuple

from ..environment.framework_table import FRAMEWORKS, rows_of
from ..environment.frameworks import installed_frameworks


def framework_of_config(cfg: Mapping[str, Any]) -> Optional[str]:
    """The name of the framework whose training a config is written for, from its top-level
    keys (each row's ``written_for`` of :mod:`~mmdet3d_ddp_guard.environment.framework_table`,
    in the table's order: MMEngine's keys, ``optim_wrapper``, ``train_dataloader``,
    ``default_scope`` or a ``train_cfg`` loop, win over mmcv 1.x's, ``optimizer_config``, a
    ``runner`` of type ``IterBasedRunner``/``EpochBasedRunner``, or ``data.train``); None
    when they say none.

    Args:
        cfg (Mapping): The config's top-level keys (either framework's ``Config``, or
            :func:`config_file_keys`).
    """
    return next((row.name for row in FRAMEWORKS if row.written_for(cfg)), None)


def config_file_keys(path: str, depth: int = 0) -> Dict[str, Any]:
    """The top-level keys of a Python config and of its ``_base_`` files (those given by a
    path; ``pkg::`` ones are skipped), read from the source without running it, so without
    either framework: literal values and ``dict(...)`` calls as dicts, other values None.

    Args:
        path (str): The config file.
        depth (int): The ``_base_`` nesting so far (a cycle stops at 8).
    """
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    keys: Dict[str, Any] = {}
    own: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    own[target.id] = _literal(node.value)
    bases = own.pop('_base_', None)
    for base in ([bases] if isinstance(bases, str) else bases or []) if depth < 8 else []:
        if isinstance(base, str) and '::' not in base:
            base_path = osp.join(osp.dirname(path), base)
            if osp.isfile(base_path):
                _merge(keys, config_file_keys(base_path, depth + 1))
    _merge(keys, own)
    return keys


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == 'dict':
        return {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)
                if k is not None}
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _merge(into: Dict[str, Any], new: Dict[str, Any]) -> None:
    # As the configs merge: a child's dict updates its base's, other values replace it.
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def written_for(path: str) -> Optional[str]:
    """:func:`framework_of_config` of the config file at ``path``; None when its keys say
    neither or its source cannot be read without running it."""
    try:
        return framework_of_config(config_file_keys(path))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def config_frameworks() -> Tuple[str, ...]:
    """The installed frameworks whose trainings a config describes (a row's
    ``reads_configs``), in the table's order: none where only torch is."""
    return tuple(row.name for row in rows_of(installed_frameworks()) if row.reads_configs)


def config_framework(path: str) -> Optional[str]:
    """The framework whose adapter simulates the config at ``path``: the installed one when
    only one that reads configs is (each adapter reads only its own framework's configs);
    where more are, the one the config is :func:`written_for`, and the table's first
    (MMEngine) when that says none; None where no installed framework reads configs.

    Args:
        path (str): The config file.
    """
    installed = config_frameworks()
    if len(installed) <= 1:
        return installed[0] if installed else None
    return written_for(path) or FRAMEWORKS[0].name
